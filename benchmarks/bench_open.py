"""Opening large snapshots: time and memory of ``Replay.open()`` for 10k, 100k and 1M captures, with the
sorted memory-mapped index (the default for large indexes) and with the in-memory index (the previous
way: every line parsed into Python objects, from the compact pickle cache), and the match time per
lookup once open.

    .venv/bin/python benchmarks/bench_open.py [--sizes 10000 100000 1000000] [--lookups 20000]
    .venv/bin/python benchmarks/bench_open.py --cold --sizes 100000 1000000 [--orders index shuffled] [--baseline main]

Snapshots come from ``_bigsnap.big_snapshot`` (built once under ``benchmarks/out/``). Every
measurement runs in a fresh Python process that imports the package, notes its resident memory,
opens the snapshot (``check=True``: the sha256 check against the manifest included) and notes the
wall time, the resident memory after opening (VmRSS) and the peak (VmHWM). Configurations:

* ``memory, sha256 every open``: what replay did before the mapped index, every open alike;
* ``mapped, first open``: the map and the canonical keys (built-in rules) were written with the
  index (the keys are rebuilt here the way ``finalize`` builds them, and that time is reported); the
  sha256s are hashed and remembered;
* ``mapped, first open, keys built on open``: an older snapshot, or other rules: the canonical keys
  are computed at open (once per rule set);
* ``mapped, later open``: median of 3, everything cached;
* ``no volatile.json``: a copy of the snapshot without its side files, opened with an empty data
  folder (map, canonical keys and learned volatility all built on that open, sha256s hashed), then
  once more (everything from the data folder's ``index-cache/``).

``--cold`` measures only the cold open (a copy without ``volatile.json``, empty data folder), then
the second open, then the same build phase by phase in one more process (sha256 check, then the steps
of ``snapshots/first_open.py``: one read of the index feeding every builder, learning, the mapped
index, the canonical keys; for code before it, each builder reading the index on its own: seconds,
CPU seconds and the peak so far), with
this tree and, with ``--baseline REV``, with the package as it was at ``REV`` (``git archive`` into a
temporary folder) in the same run, and rewrites the ``open-cold`` section instead. ``--orders``: the
snapshots' recorded order (``_bigsnap``): ``index``, written in the order of the index (so the map's
lines are copied from the index nearly in turn), and ``shuffled``, written in a random browsing order
as a recording is (the index's offsets and timestamps in random order); both by default.

Then, in the same process, ``--lookups`` exact matches of random URLs of the snapshot (one
``ReplaySession.match`` and the capture it returns each): p50 and p99 in microseconds. Prints a table
and rewrites the ``open`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _bigsnap import Order, big_snapshot  # noqa: E402
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
import json, random, sys, time
from pathlib import Path

def status(name):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0

snap, mode, rehash, n, lookups = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5])
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots import hashmemo
sys.path.insert(0, sys.argv[6])
from _synthetic import synthetic_url
if rehash:
    hashmemo.SETTLE_SECONDS = float("inf")  # never trust a memo: hash on every open, as before
base = status("VmRSS")
t0, c0 = time.perf_counter(), time.process_time()
replay = Replay([snap], index=mode, check=True)
replay.open()
opened = time.perf_counter() - t0
out = {"open_s": opened, "cpu_s": time.process_time() - c0, "base_mib": base, "rss_mib": status("VmRSS"), "peak_mib": status("VmHWM"),
       "captures": replay.captures, "kind": type(replay.replayer.index).__name__}
if lookups:
    session = replay.replayer.index.session()
    rng = random.Random(7)
    urls = [synthetic_url(rng.randrange(n)) for _ in range(lookups)]
    times = []
    for url in urls:
        t = time.perf_counter_ns()
        result = session.match("GET", url)
        times.append(time.perf_counter_ns() - t)
        assert result.outcome == "exact" and result.capture.url == url
    times.sort()
    out["p50_us"] = times[len(times) // 2] / 1000
    out["p99_us"] = times[int(len(times) * 0.99)] / 1000
    out["rss_after_lookups_mib"] = status("VmRSS")
print(json.dumps(out))
"""


_PHASES = r"""
import json, sys, time
from pathlib import Path

def status(name):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0

from ego2web_replay.replay.rules import default_rules
from ego2web_replay.snapshots.location import open_snapshot
from ego2web_replay.snapshots.verify import integrity_problems

snap = Path(sys.argv[1])
index = snap / "index.cdxj"
out = {}
def phase(name, work):
    t, c = time.perf_counter(), time.process_time()
    result = work()
    out[name] = {"s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "peak_mib": status("VmHWM")}
    return result
snapshot = open_snapshot(snap)
phase("sha256 check of archive and index", lambda: integrity_problems(snapshot))
rules = default_rules()
try:
    from ego2web_replay.snapshots.first_open import build_first_open
except ImportError:  # the code before one read fed every builder: each phase reads the index itself
    build_first_open = None
if build_first_open is None:
    from ego2web_replay.replay.mapped import _build_canonical, canonical_file
    from ego2web_replay.snapshots.index_map import IndexMap, build_index_map
    from ego2web_replay.snapshots.learned_cache import learn_index_file
    from ego2web_replay.snapshots.sortedfile import SortedFile

    phase("learn volatility (parse, group by path)", lambda: learn_index_file(index))
    target = phase("mapped index (parse, recorded order, exact keys, digests, write)", lambda: build_index_map(index))
    imap = IndexMap(SortedFile(target), index)
    phase("canonical keys (parse, canonicalise, sort, write)", lambda: _build_canonical(imap, rules, canonical_file(imap, rules)))
else:  # the steps of first_open.build_first_open, one by one
    from ego2web_replay.replay.mapped import _CanonicalKeys
    from ego2web_replay.snapshots.index_map import IndexMap, MapBuilder
    from ego2web_replay.snapshots.indexscan import collector_paused, scan_index
    from ego2web_replay.snapshots.learned_cache import Learner, cache_dir
    from ego2web_replay.snapshots.sortedfile import SortedFile

    builder, learner, keys = MapBuilder(index), Learner(), _CanonicalKeys(rules, cache_dir())
    with collector_paused():
        def read():
            for batch in scan_index(index):
                builder.add_batch(batch)
                learner.add_batch(batch)
                keys.add_batch(batch)
        phase("one read of the index (parse; map keys, learner's hashes, canonical keys gathered)", read)
        phase("learn volatility (groups met more than once)", lambda: learner.learn(index))
        target, rank = phase("mapped index (recorded order, sort, write)", builder.write)
        imap = IndexMap(SortedFile(target), index)
        phase("canonical keys (sort, write)", lambda: keys.finish(imap, rank))
out["code"] = __import__("ego2web_replay").__file__
print(json.dumps(out))
"""


def child(snap: Path, mode: str, rehash: bool, n: int, lookups: int, home: Path | None = None,
          code: Path | None = None) -> dict[str, float]:
    """One open in a fresh process, with the package at ``code`` (default: this tree)."""
    return _run([_CHILD, str(snap), mode, "1" if rehash else "0", str(n), str(lookups),
                 str(Path(__file__).resolve().parent)], home, code, f"open of {snap} ({mode})")


def _run(args: list[str], home: Path | None, code: Path | None, what: str) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(code or Path(__file__).resolve().parent.parent))
    if home is not None:
        env["EGO2WEB_REPLAY_HOME"] = str(home)
    # run from the code's own folder: ``python -c`` puts the working directory first on sys.path
    out = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=env, timeout=3600,
                         cwd=str(code or Path(__file__).resolve().parent.parent))
    if out.returncode:
        raise SystemExit(f"{what} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fresh_home() -> tempfile.TemporaryDirectory[str]:
    """An empty data folder (no index cache, no hash memo), private as the package wants it."""
    home = tempfile.TemporaryDirectory()
    os.chmod(home.name, 0o700)
    return home


def baseline_tree(rev: str, into: Path) -> Path:
    """The package as it was at ``rev``, extracted into ``into`` (for PYTHONPATH)."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "ego2web_replay"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def cold(sizes: list[int], orders: list[Order], baseline: str | None, write: bool) -> None:
    """The cold open rows, before and after, and the phases of the build (see the module docstring)."""
    info = machine_info()
    rows, phases = [], []
    with tempfile.TemporaryDirectory() as base_dir:
        codes: list[tuple[str, Path | None]] = [("this tree", None)]
        if baseline:
            rev = subprocess.run(["git", "rev-parse", "--short", baseline], capture_output=True, text=True,
                                 check=True).stdout.strip()
            name = rev if rev.startswith(baseline) else f"{baseline}, {rev}"
            codes.append((f"before ({name})", baseline_tree(baseline, Path(base_dir))))
        for n, order in [(n, order) for n in sizes for order in orders]:
            snap, _built = big_snapshot(n, order)
            bare = without_side_files(snap)
            from ego2web_replay.snapshots.hashmemo import SETTLE_SECONDS

            # the copy's hard links settled first: each code's second open may trust the digests
            # its first open kept (within SETTLE_SECONDS of a change, the hash memo trusts none)
            time.sleep(SETTLE_SECONDS)
            try:
                for label, code in codes:
                    with fresh_home() as home:
                        first = child(bare, "mapped", False, n, 0, Path(home), code)
                        second = child(bare, "mapped", False, n, 0, Path(home), code)
                    for what, r in (("cold open", first), ("second open", second)):
                        rows.append([f"{n:,}", order, label, what, f"{r['open_s']:.2f}", f"{r['cpu_s']:.2f}",
                                     f"{r['peak_mib']:.0f}", f"{r['rss_mib']:.0f}", loadavg()])
                        print("  " + " | ".join(rows[-1]), flush=True)
                    with fresh_home() as home:
                        split = _run([_PHASES, str(bare)], Path(home), code, f"phases of {bare}")
                    print(f"  {label}: {split.pop('code')}")
                    for name, r in split.items():
                        phases.append([f"{n:,}", order, label, name, f"{r['s']:.2f}", f"{r['cpu_s']:.2f}", f"{r['peak_mib']:.0f}"])
                        print("  " + " | ".join(phases[-1]), flush=True)
            finally:
                shutil.rmtree(bare)
    header = ["captures", "recorded order", "code", "open", "Replay.open() s", "CPU s", "peak RSS MiB", "RSS after open MiB",
              "load average after (1/5/15 min)"]
    phase_header = ["captures", "recorded order", "code", "phase (one process, in this order)", "s", "CPU s", "peak RSS so far MiB"]
    print(text_table(header, rows))
    print(text_table(phase_header, phases))
    body = f"""## Cold opens of large snapshots (`benchmarks/bench_open.py --cold`)

`Replay.open()` (sha256 check included) of a synthetic snapshot copied without `volatile.json`,
with an empty data folder: everything is built on that open (sha256s, learned volatility, the
mapped index, the canonical keys of the built-in rules), kept in `index-cache/` for the second
open. Each open in a fresh process; "CPU s" is the process's CPU time (user + system), the figure
to read when the machine is shared: wall time then includes waiting for a core. The second table
runs the same build phase by phase in one more fresh process (this tree: the steps of
`snapshots/first_open.py`, one read of the index feeding the map, the learner and the canonical
keys; code before it: each builder reading the index on its own). Recorded order: "index", the
exchanges written in the order of the index's URLs at one timestamp (recorded order nearly the
index's order); "shuffled", written in a fixed random browsing order, timestamps rising along the
archive, as a recording writes them (the index, sorted by URL, has its offsets and timestamps in
random order). Target (issue 27): a first open of 1,000,000 captures in under 10 s and under 300 MiB.

{markdown_table(header, rows)}

{markdown_table(phase_header, phases)}

Machine and versions:
{machine_lines(info)}
"""
    if write:
        update_section("open-cold", body)
        print("BENCHMARKS.md: section 'open-cold' updated")


def forget_canonical(snap: Path) -> None:
    """Drop the canonical keys of ``snap``'s index (so that a first mapped open computes them)."""
    from ego2web_replay.replay.mapped import canonical_file
    from ego2web_replay.replay.rules import default_rules
    from ego2web_replay.snapshots.index_map import open_index_map

    imap = open_index_map(snap / "index.cdxj")
    canonical_file(imap, default_rules()).unlink(missing_ok=True)
    imap.close()


def build_canonical(snap: Path) -> float:
    """Build the canonical keys of ``snap``'s index as the index build does; return the seconds taken."""
    from ego2web_replay.replay.mapped import build_default_canonical
    from ego2web_replay.snapshots.index_map import open_index_map

    imap = open_index_map(snap / "index.cdxj")
    t0 = time.perf_counter()
    build_default_canonical(imap)
    took = time.perf_counter() - t0
    imap.close()
    return took


def without_side_files(snap: Path) -> Path:
    """A copy of ``snap`` (archive and index hard-linked) without ``volatile.json``, its manifest
    listing no such file: a snapshot written before learning existed, or copied without it."""
    copy = snap.parent / f"{snap.name}-no-side-files"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for name in ("archive.warc.zst", "index.cdxj"):
        os.link(snap / name, copy / name)
    manifest = json.loads((snap / "manifest.json").read_text())
    manifest["files"] = [f for f in manifest["files"] if f["path"] != "volatile.json"]
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return copy


def forget_hashes(snap: Path) -> None:
    from ego2web_replay.snapshots import hashmemo

    for name in ("archive.warc.zst", "index.cdxj"):
        hashmemo._memo_file(snap / name).unlink(missing_ok=True)


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--lookups", type=int, default=20_000, help="exact matches timed after each open")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--cold", action="store_true",
                    help="only the cold open (no side files, empty data folder), its second open and its phases; "
                         "rewrites the open-cold section")
    ap.add_argument("--orders", nargs="+", choices=["index", "shuffled"], default=["index", "shuffled"],
                    help="with --cold: the recorded orders of the snapshots measured (see _bigsnap)")
    ap.add_argument("--baseline", metavar="REV", help="with --cold: also measure the package as it was at this git revision")
    args = ap.parse_args()
    if args.cold:
        cold(args.sizes, args.orders, args.baseline, not args.no_write)
        return
    info = machine_info()
    rows = []
    builds = []
    for n in args.sizes:
        snap, built = big_snapshot(n)
        size = sum(p.stat().st_size for p in (snap / "archive.warc.zst", snap / "index.cdxj"))
        builds.append([f"{n:,}", f"{size / 2**20:.0f} MiB", f"{built['write_s']:.0f} s", f"{built['cache_s']:.1f} s"])
        results: list[tuple[str, dict[str, float]]] = []
        results.append(("memory, sha256 every open (before)", child(snap, "memory", True, n, args.lookups)))
        forget_canonical(snap)
        forget_hashes(snap)
        results.append(("mapped, first open, keys built on open", child(snap, "mapped", False, n, 0)))
        forget_canonical(snap)
        forget_hashes(snap)
        builds[-1].append(f"{build_canonical(snap):.1f} s")
        results.append(("mapped, first open", child(snap, "mapped", False, n, 0)))
        time.sleep(2.5)  # the hash memo trusts files settled before they were hashed; these are old
        later = [child(snap, "mapped", False, n, args.lookups if i == 2 else 0) for i in range(3)]
        med = dict(later[2])
        med["open_s"] = statistics.median(r["open_s"] for r in later)
        results.append(("mapped, later open (median of 3)", med))
        bare = without_side_files(snap)
        with tempfile.TemporaryDirectory() as home:  # an empty data folder: no index cache, no hash memo
            os.chmod(home, 0o700)
            results.append(("mapped, no volatile.json, empty data folder: first open",
                            child(bare, "mapped", False, n, 0, Path(home))))
            results.append(("mapped, no volatile.json: second open", child(bare, "mapped", False, n, 0, Path(home))))
        shutil.rmtree(bare)
        for label, r in results:
            lookup = (f"{r['p50_us']:.0f} / {r['p99_us']:.0f}" if "p50_us" in r else "-")
            print(f"  {n:>9,} {label}: open {r['open_s']:.2f} s, RSS {r['rss_mib']:.0f} MiB (peak {r['peak_mib']:.0f},"
                  f" before open {r['base_mib']:.0f}), lookup p50/p99 {lookup} us, load {loadavg()}")
            rows.append([f"{n:,}", label, f"{r['open_s']:.2f}", f"{r['rss_mib']:.0f}", f"{r['peak_mib']:.0f}",
                         f"{r['rss_mib'] - r['base_mib']:.0f}", lookup, loadavg()])
    header = ["captures", "index", "Replay.open() s", "RSS after open MiB", "peak RSS MiB",
              "RSS added by open MiB", "exact match p50 / p99 us", "load average after (1/5/15 min)"]
    print(text_table(header, rows))
    build_header = ["captures", "archive + index", "archive written in", "index caches (pickle + map) built in",
                    "canonical keys built in"]
    print(text_table(build_header, builds))
    body = f"""## Opening large snapshots (`benchmarks/bench_open.py`)

`Replay.open()` of synthetic snapshots (small JSON exchanges, `benchmarks/_bigsnap.py`), each
measurement in a fresh process, with the sha256 check against the manifest (`check=True`, the
default). "memory" parses every index line into Python objects and dictionaries (the way replay
worked before the mapped index; from the compact pickle cache, hashing archive and index on every
open); "mapped" searches sorted, memory-mapped files by bisection
(`ego2web_replay/snapshots/index_map.py`, `replay/mapped.py`): the map and the canonical keys of
the built-in rules are written with the index (an older snapshot, or other rules, get their keys
computed on the first open: the "keys built on open" row; a snapshot without `volatile.json` opened
with an empty data folder has everything built then, including its learned volatility, kept in
`index-cache/` for the second open: the "no volatile.json" rows); the first open hashes the files once,
remembering the digests while the files are unchanged (`snapshots/hashmemo.py`; `snapshot verify` always re-hashes). Resident memory
counts the mapped pages touched. Lookups: {args.lookups:,} exact matches of random captures in the
opened process (`ReplaySession.match`, capture included). The target (issue 16): a million captures
open in under 2 s and under 300 MiB.

{markdown_table(header, rows)}

{markdown_table(build_header, builds)}

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("open", body)
        print("BENCHMARKS.md: section 'open' updated")


if __name__ == "__main__":
    main()
