"""Detection quality of the change classifier on the labelled drift cases, and of attribution end to end.

    .venv/bin/python benchmarks/bench_drift.py [--cases benchmarks/drift_cases.yaml] [--no-pipeline] [--no-write]

Classifies every case of the labelled set (a resource as frozen and as live, with the label a person
gives it: unchanged, changed, gone, blocked) with ``ego2web_replay.tracking.changes.classify`` and
prints precision and recall per label, the confusion table and the cases it got wrong. Then (unless
``--no-pipeline``; it needs the dev extra and Chromium, about two minutes) runs the end-to-end cases
of ``ego2web_replay.testing.drift_pipeline``: real third-party apps on 127.0.0.1 recorded, drifted,
run live and frozen, judged, tracked in DuckDB and compared, and prints how each flip was attributed
and the accuracy per label. Rewrites the ``drift`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    exit_on_sigterm,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
)

from ego2web_replay.testing.drift_cases import LABELS, evaluate, load_drift_cases  # noqa: E402

CASES = Path(__file__).resolve().parent / "drift_cases.yaml"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES, help="The labelled set (YAML).")
    ap.add_argument("--no-pipeline", action="store_true", help="Skip the end-to-end cases (Chromium, ~2 minutes).")
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
    pipeline = "" if args.no_pipeline else _pipeline()
    if args.no_write:
        return
    wrong = markdown_table(["case", "kind", "label", "classified as"], mistakes) if mistakes else "None."
    body = f"""## Drift detection (`benchmarks/bench_drift.py`)

The change classifier (`ego2web_replay/tracking/changes.py`, used by `drift diff`, `compare`'s
attribution and `drift probe`) on the labelled set `benchmarks/drift_cases.yaml`: {ev.cases} cases
({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), each a resource as frozen and as live:
price changes in JSON, a delisted item, soft 404s, redesigns with the same facts and ones that move
the answer, CAPTCHA walls, sign-in walls (a redirect to the sign-in page, a sign-in form in the
page's place), access refusals, pages that only mention CAPTCHA or gained a sign-in box, and
unchanged pages with rotating ads, timestamps, timings and CSRF tokens. Its harder cases are kept in the set on
purpose, so the figures show what the classifier misses.

{markdown_table(header, rows)}

Confusion (rows: the label; columns: what the classifier said):

{markdown_table(confusion_header, confusion)}

{summary}.

Cases classified wrongly:

{wrong}
{pipeline}
Machine and versions:
{machine_lines(info)}
"""
    update_section("drift", body)
    print("BENCHMARKS.md: section 'drift' updated")


def _pipeline() -> str:
    """Run the end-to-end cases; print and return their markdown."""
    from ego2web_replay.testing.drift_pipeline import PIPELINE_CASES, run_pipeline_cases
    from ego2web_replay.testing.thirdparty import available

    missing = [m for m in ("datasette", "mkdocs", "flask_login") if not available(m)]
    if missing:
        print(f"end-to-end cases skipped: {', '.join(missing)} not installed (pip install -e '.[dev]')")
        return ""
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-drift-") as work:
        outcomes = run_pipeline_cases(Path(work))
    seconds = time.perf_counter() - t
    labels = list(dict.fromkeys(c.label for c in PIPELINE_CASES))
    header = ["label", "cases", "attributed as labelled", "accuracy"]
    rows = []
    for label in labels:
        mine = [o for o in outcomes if o.case.label == label]
        right = sum(o.correct for o in mine)
        rows.append([label, len(mine), right, _pct(right / len(mine))])
    case_header = ["case", "kind", "label", "attributed as", "from", "probe's task status", "first cause"]
    cases = [[o.case.id, o.case.kind, o.case.label, o.status, o.source, o.probe_status or "–",
              o.detail.replace("|", "\\|")[:160]] for o in outcomes]
    right = sum(o.correct for o in outcomes)
    summary = (f"{right} of {len(outcomes)} flips attributed as labelled ({100 * right / len(outcomes):.0f}%); "
               f"{seconds:.0f} s for the whole pipeline")
    print()
    print(text_table(header, rows))
    print()
    print(text_table(case_header[:6], [r[:6] for r in cases]))
    print()
    print(summary)
    return f"""
### End to end: `run` → `compare` on real third-party apps

The cases of `ego2web_replay/testing/drift_pipeline.py` (the same ones `tests/test_drift_pipeline.py`
checks): a task each on Datasette, MkDocs and a Flask shop behind Flask-Login, all on 127.0.0.1,
recorded with Chromium through the recording proxy; then the app drifts (a price changes in the
JSON a static page fetches, a sign-in wall goes up, a page is removed and the host answers 200
with MkDocs' 404 page, the site goes down); the scripted agent runs each task live and frozen, the
rule judge judges both, the episodes go into a DuckDB file, and `compare` attributes each
live/frozen flip from the live episode's own archive. A control case does not drift: a fallible
agent answers a Datasette row page wrongly in its live run only, on a site whose pages differ only
in volatile content (Datasette's query timings), so its flip is the agent's own. A drift probe taken after the drift is shown
beside it (it cannot reach a site that is down, so it says `unknown` there). There is one case
per label: the figures say that each path works end to end, not how often it does.

{markdown_table(header, rows)}

{markdown_table(case_header, cases)}

{summary}.
"""


if __name__ == "__main__":
    main()
