"""Detection quality of the change classifier on the labelled drift cases.

    .venv/bin/python benchmarks/bench_drift.py [--cases benchmarks/drift_cases.yaml] [--no-write]

Classifies every case of the labelled set (a resource as frozen and as live, with the label a person
gives it: unchanged, changed, gone, blocked) with ``ego2web_replay.tracking.changes.classify`` and
prints precision and recall per label, the confusion table and the cases it got wrong; rewrites the
``drift`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import machine_info, machine_lines, markdown_table, text_table, update_section  # noqa: E402

from ego2web_replay.testing.drift_cases import LABELS, evaluate, load_drift_cases  # noqa: E402

CASES = Path(__file__).resolve().parent / "drift_cases.yaml"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES, help="The labelled set (YAML).")
    ap.add_argument("--no-write", action="store_true", help="Print only; do not touch BENCHMARKS.md.")
    args = ap.parse_args()
    info = machine_info()
    cases = load_drift_cases(args.cases)
    t = time.perf_counter()
    ev = evaluate(cases)
    per_case_ms = 1000 * (time.perf_counter() - t) / max(1, len(cases))
    header = ["label", "cases", "precision", "recall"]
    rows = [[label, support, _pct(p), _pct(r)] for label, (p, r, support) in ev.per_label.items()]
    confusion_header = ["label \\ classified as", *LABELS]
    confusion = [[a, *(ev.confusion.get((a, p), 0) for p in LABELS)] for a in LABELS]
    mistakes = [[cid, kind, label, got] for cid, kind, label, got in ev.mistakes]
    kinds = Counter(c.label for c in cases)
    summary = (f"{ev.correct} of {ev.cases} cases classified as labelled ({100 * ev.accuracy:.0f}%); "
               f"{per_case_ms:.2f} ms per case")
    print(text_table(header, rows))
    print()
    print(text_table(confusion_header, confusion))
    print()
    print(summary)
    for m in mistakes:
        print("wrong:", " | ".join(m))
    if args.no_write:
        return
    wrong = markdown_table(["case", "kind", "label", "classified as"], mistakes) if mistakes else "None."
    body = f"""## Drift detection (`benchmarks/bench_drift.py`)

The change classifier (`ego2web_replay/tracking/changes.py`, used by `drift diff`, `compare`'s
attribution and `drift probe`) on the labelled set `benchmarks/drift_cases.yaml`: {ev.cases} cases
({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), each a resource as frozen and as live:
price changes in JSON, a delisted item, soft 404s, redesigns with the same facts and ones that move
the answer, CAPTCHA walls, access refusals, pages that only mention CAPTCHA, and unchanged pages
with rotating ads, timestamps, timings and CSRF tokens. Its harder cases are kept in the set on
purpose, so the figures show what the classifier misses.

{markdown_table(header, rows)}

Confusion (rows: the label; columns: what the classifier said):

{markdown_table(confusion_header, confusion)}

{summary}.

Cases classified wrongly:

{wrong}

Machine and versions:
{machine_lines(info)}
"""
    update_section("drift", body)
    print("BENCHMARKS.md: section 'drift' updated")


if __name__ == "__main__":
    main()
