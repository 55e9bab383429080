"""The index caches that ``finalize`` and ``snapshot index`` build (``warm_cache``), this tree against the
package as it was at a git revision, on large synthetic snapshots in both recorded orders.

    .venv/bin/python benchmarks/bench_warm.py [--sizes 100000 1000000] [--orders index shuffled]
        [--baseline main] [--rounds 2] [--no-write]

``warm_cache`` writes a large index's compact cache (the parsed rows pickled, for the in-memory
index), its mapped form and replay's canonical keys (the map hook, wired as the commands wire it).
Snapshots come from ``_bigsnap.big_snapshot`` (built once under ``benchmarks/out/``; ``index``:
written in the order of the index, ``shuffled``: in a random browsing order as a recording is, so
the index, sorted by URL, has its offsets and timestamps in random order). Their index is
hard-linked into a temporary folder; every build runs in a fresh Python process with an empty data
folder and notes the wall time, its CPU time (user + system: the figure to read on a shared
machine) and its peak resident memory (VmHWM), then hashes the files it wrote: both codes must
write the same files with the same bytes. The baseline is the package at ``--baseline`` (``git
archive`` into a temporary folder); the rounds alternate which code goes first. Prints a table and
rewrites the ``warm`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _bigsnap import big_snapshot  # noqa: E402
from _common import (  # noqa: E402
    exit_on_sigterm,
    loadavg,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
)

_CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path

def status(name):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0

from ego2web_replay.commands._hooks import wire_index_hooks
from ego2web_replay.snapshots.index_cache import cache_dir, warm_cache

index = Path(sys.argv[1])
wire_index_hooks()
before = status("VmHWM")
t, c = time.perf_counter(), time.process_time()
warm_cache(index)
out = {"s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "peak_mib": status("VmHWM"),
       "peak_before_mib": before, "files": {}}
for path in sorted(cache_dir().iterdir()):
    kind = "canonical" if path.name.endswith(".canonical.sorted") else path.suffix  # its name holds the map's mtime
    out["files"][kind] = hashlib.sha256(path.read_bytes()).hexdigest()
out["code"] = __import__("ego2web_replay").__file__
print(json.dumps(out))
"""


def _build(index: Path, code: Path | None) -> dict:
    """``warm_cache(index)`` in a fresh process with an empty data folder, with the package at ``code``."""
    root = code or Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as home:
        os.chmod(home, 0o700)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(root), EGO2WEB_REPLAY_HOME=home)
        out = subprocess.run([sys.executable, "-c", _CHILD, str(index)], capture_output=True, text=True, env=env,
                             timeout=1800, cwd=str(root))
    if out.returncode:
        raise SystemExit(f"warm_cache of {index} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _baseline_tree(rev: str, into: Path) -> Path:
    root = Path(__file__).resolve().parent.parent
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "ego2web_replay"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--orders", nargs="+", choices=["index", "shuffled"], default=["index", "shuffled"])
    ap.add_argument("--baseline", metavar="REV", default="main", help="the code to compare with (a git revision)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], capture_output=True, text=True,
                         check=True).stdout.strip()
    before = f"before ({args.baseline}, {rev})" if not rev.startswith(args.baseline) else f"before ({rev})"
    rows, ratios, same_all = [], [], True
    with tempfile.TemporaryDirectory() as work:
        os.environ["EGO2WEB_REPLAY_HOME"] = str(Path(work) / "home")  # big_snapshot's own caches: thrown away
        codes: dict[str, Path | None] = {before: _baseline_tree(args.baseline, Path(work) / "base"), "now": None}
        for n in args.sizes:
            for order in args.orders:
                folder, _built = big_snapshot(n, order)
                place = Path(work) / f"{n}-{order}"
                place.mkdir()
                index = place / "index.cdxj"
                os.link(folder / "index.cdxj", index)  # warm_cache keys its files by the index's path: a copy of ours
                got: dict[str, list[dict]] = {name: [] for name in codes}
                for k in range(args.rounds):
                    for name in (list(codes) if k % 2 == 0 else list(reversed(codes))):
                        r = _build(index, codes[name])
                        got[name].append(r)
                        if k == 0:
                            print(f"  {name}: {r['code']}")
                        print(f"  {n:,} {order} {name} round {k + 1}: {r['s']:.2f} s, CPU {r['cpu_s']:.2f} s, "
                              f"peak {r['peak_mib']:.0f} MiB; load {loadavg()}", flush=True)
                hashes = [r["files"] for rs in got.values() for r in rs]
                same = all(h == hashes[0] for h in hashes) and len(hashes[0]) == 3
                same_all = same_all and same
                med = {name: {key: statistics.median(r[key] for r in rs) for key in ("s", "cpu_s", "peak_mib")}
                       for name, rs in got.items()}
                for name, rs in got.items():
                    rows.append([f"{n:,}", order, name, ", ".join(f"{r['s']:.1f}" for r in rs),
                                 f"{med[name]['s']:.2f}", f"{med[name]['cpu_s']:.2f}", f"{med[name]['peak_mib']:.0f}",
                                 "yes" if same else "NO", loadavg()])
                ratios.append([f"{n:,}", order, f"{med['now']['s'] / med[before]['s']:.2f}x",
                               f"{med['now']['cpu_s'] / med[before]['cpu_s']:.2f}x",
                               f"{med['now']['peak_mib'] / med[before]['peak_mib']:.2f}x"])
                index.unlink()
    header = ["captures", "recorded order", "code", "rounds s", "median s", "CPU s", "peak RSS MiB",
              "same 3 files, same bytes", "load after (1/5/15 min)"]
    ratio_header = ["captures", "recorded order", "now / before: s", "CPU s", "peak RSS"]
    print(text_table(header, rows))
    print(text_table(ratio_header, ratios))
    body = f"""## Index caches at finalize and `snapshot index` (`benchmarks/bench_warm.py`)

`warm_cache` on the index of synthetic snapshots (`benchmarks/_bigsnap.py`) in both recorded orders:
*index*, written in the order of the index's URLs (recorded order nearly the index's), and
*shuffled*, written in a random browsing order as a recording is (the index, sorted by URL, has its
offsets and timestamps in random order). It writes the compact cache of the parsed rows (the
in-memory index's pickle), the mapped index and replay's canonical keys (the map hook, wired as the
commands wire it). *{before}*: the map and the canonical keys from one read of the index, the
compact cache from every row parsed, sorted and pickled; *now*: all three from the one read, the
compact cache written as pickle's bytes row by row (`snapshots/compact_rows.py`), put in recorded
order by the map's sequential bucket passes. Each build in a fresh process with an empty data
folder; {args.rounds} rounds, alternating which code goes first; medians. CPU s: the process's user +
system time, the figure to compare on this shared machine (wall time includes waiting for a core).

{markdown_table(header, rows)}

{markdown_table(ratio_header, ratios)}

- Both codes wrote the same 3 files with the same bytes in every build: **{"yes" if same_all else "NO"}**.
- This is the step of `finalize` / `snapshot index` that changed; the rest (parsing the archive to index
  it, hashing the files) is as before.

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("warm", body)
        print("BENCHMARKS.md: section 'warm' updated")
    if not same_all:
        raise SystemExit("bench_warm.py: the two codes wrote different caches")


if __name__ == "__main__":
    main()
