"""The index caches that ``finalize`` and ``snapshot index`` build (``warm_cache``), from one read of the
index against the parsed rows, on a large synthetic snapshot.

    .venv/bin/python benchmarks/bench_warm.py [--captures 100000] [--rounds 2] [--no-write]

``warm_cache`` writes a large index's compact cache (the parsed rows), its mapped form and replay's
canonical keys (the map hook, wired as the commands wire it). *parsed rows* is the build as it was
(every row parsed, the map built from the rows, the canonical keys read back from the map's lines);
*one read* is ``warm_cache`` now (the map and the canonical keys from one read of the file,
``snapshots/first_open.py``; the compact cache from the parsed rows). Each build starts with an empty
``index-cache/``; the rounds alternate which goes first, and every round checks that both wrote the
same files with the same bytes; then the compact cache is built alone (the part both share). Prints a table and rewrites the ``warm`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    exit_on_sigterm,
    loadavg,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
)


def _parsed_rows(index: Path) -> None:
    """``warm_cache`` as it was: the rows parsed (and kept), the map from the rows, then the map hooks."""
    from ego2web_replay.snapshots.index_cache import index_rows
    from ego2web_replay.snapshots.index_map import build_index_map, run_map_hooks

    rows = index_rows(index)
    target = build_index_map(index, rows)
    del rows
    run_map_hooks(index, target)


def _one_read(index: Path) -> None:
    from ego2web_replay.snapshots.index_cache import warm_cache

    warm_cache(index)


def _compact(index: Path) -> None:
    """The part both builds share: the rows parsed and kept as the compact cache (for the memory index)."""
    from ego2web_replay.snapshots.index_cache import index_rows

    index_rows(index)


def _files() -> dict[str, bytes]:
    """What the build wrote, by name (canonical keys by kind: their name holds the map's mtime), then emptied."""
    from ego2web_replay.snapshots.index_cache import cache_dir

    out = {}
    for path in sorted(cache_dir().iterdir()):
        out["canonical" if path.name.endswith(".canonical.sorted") else path.name] = path.read_bytes()
    shutil.rmtree(cache_dir())
    cache_dir().mkdir()
    return out


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    home = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    os.environ["EGO2WEB_REPLAY_HOME"] = str(home)
    from _bigsnap import big_snapshot

    from ego2web_replay.commands._hooks import wire_index_hooks
    from ego2web_replay.snapshots.index_cache import cache_dir
    from ego2web_replay.snapshots.snapshot import INDEX

    try:
        folder, _built = big_snapshot(args.captures)
        index = folder / INDEX
        wire_index_hooks()
        shutil.rmtree(cache_dir(), ignore_errors=True)
        cache_dir().mkdir(parents=True)
        variants = {"parsed rows (before)": _parsed_rows, "one read (now)": _one_read}
        times: dict[str, list[float]] = {name: [] for name in [*variants, "of which: the compact cache alone"]}
        same = True
        for k in range(args.rounds):
            order = list(variants) if k % 2 == 0 else list(reversed(variants))
            written = {}
            for name in order:
                t0 = time.perf_counter()
                variants[name](index)
                times[name].append(time.perf_counter() - t0)
                written[name] = _files()
            t0 = time.perf_counter()
            _compact(index)
            times["of which: the compact cache alone"].append(time.perf_counter() - t0)
            _files()
            a, b = written.values()
            same = same and a == b and len(a) == 3
            print(f"round {k + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in order)
                  + f"; same files and bytes: {a == b} ({len(a)} files); load {loadavg()}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    base = statistics.median(times["parsed rows (before)"])
    header = ["build", "rounds", "median", "min", "vs parsed rows"]
    rows = [[name, ", ".join(f"{t:.2f} s" for t in ts), f"{statistics.median(ts):.2f} s", f"{min(ts):.2f} s",
             f"{statistics.median(ts) / base:.2f}x"] for name, ts in times.items()]
    print(text_table(header, rows))
    body = f"""## Index caches at finalize and `snapshot index` (`benchmarks/bench_warm.py`)

`warm_cache` on the index of a synthetic snapshot of {args.captures:,} captures (`benchmarks/_bigsnap.py`):
the compact cache of the parsed rows, the mapped index and replay's canonical keys (the map hook, wired as
the commands wire it). *parsed rows*: as it was built before (every row parsed, the map from the rows, the
canonical keys read back from the map's lines); *one read*: now (the map and the canonical keys from one
read of the file, `snapshots/first_open.py`; the compact cache still from the parsed rows). Each build
starts with an empty `index-cache/`; {args.rounds} rounds, alternating which goes first.

{markdown_table(header, rows)}

- Both wrote the same {3} files with the same bytes in every round: **{"yes" if same else "NO"}**.
- *the compact cache alone* is the part both builds still share: the rows parsed and pickled for the
  memory index, which replay reads only for indexes under 512 KiB or with `EGO2WEB_REPLAY_INDEX=memory`.
- This is the step of `finalize` / `snapshot index` that changed; the rest (parsing the archive to index
  it, hashing the files) is as before.

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("warm", body)
        print("BENCHMARKS.md: section 'warm' updated")
    if not same:
        raise SystemExit("bench_warm.py: the two builds wrote different caches")


if __name__ == "__main__":
    main()
