"""Coverage that grows: how many fresh exploring agents stay on the snapshot of a Datasette suite, by explorers recorded.

    .venv/bin/python benchmarks/bench_coverage.py [--tasks 2] [--agents 1] [--steps 3] [--recorded 0,1,2,4] [--no-write]

A real third-party app installed from PyPI, Datasette, serves a SQLite shop on 127.0.0.1 (products
with full-text search, customers, orders with foreign keys, suppliers; 5 rows a page). The suite has
one task per table (the first ``--tasks`` of them), each starting on its table page and recorded by its reference path (the base
snapshots). ``record --explore``'s machinery (``ego2web_replay.runner.explore``) then runs the
seeded ``explorer`` agent (seeds 101..) live over the suite, and for each k of ``--recorded`` every
task's base is extended with the archives of the first k explorers (window 1 h) into a snapshots
root of its own. ``--agents`` fresh explorers (seeds 1.., never used to record) run the whole suite
frozen against each root, without and (when ``run --share-window`` exists) with suite sharing.
``snapshot coverage`` (``coverage_shares``) counts their episodes complete, degraded and
off-snapshot and their documents and content fetches that missed; the missed requests are grouped
by shape (digits and query values elided) to say why. Rewrites the ``coverage`` section of
BENCHMARKS.md. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from _common import (  # noqa: E402
    exit_on_sigterm,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
)

TABLES = ["products", "customers", "orders", "suppliers"]  # orders link to customers and products
RECORD_SEED = 101
SHARE_WINDOW_S = 3600.0
CITIES = ["Lyon", "Porto", "Turin", "Ghent", "Basel", "Cork"]


def _more_tables(con: sqlite3.Connection) -> None:
    con.execute("create table customers (id integer primary key, name text, city text)")
    con.executemany("insert into customers (name, city) values (?, ?)",
                    [(f"customer {n}", CITIES[n % len(CITIES)]) for n in range(1, 13)])
    con.execute("create table suppliers (id integer primary key, name text, country text)")
    con.executemany("insert into suppliers (name, country) values (?, ?)",
                    [(f"supplier {n}", ["FR", "PT", "IT", "BE"][n % 4]) for n in range(1, 7)])
    con.execute("create table orders (id integer primary key, customer_id integer references customers(id), "
                "product_id integer references products(id), quantity integer)")
    con.executemany("insert into orders (customer_id, product_id, quantity) values (?, ?, ?)",
                    [(1 + n % 12, 1 + (3 * n) % 10, 1 + n % 4) for n in range(15)])


def _suite(folder: Path, url: str, tables: list[str]) -> Path:
    lines = [json.dumps({"id": f"datasette-{t}", "instruction": f"Look through the {t} of the shop.",
                         "start_url": f"{url}/shop/{t}", "allowed_domains": ["127.0.0.1"],
                         "reference_actions": [{"kind": "goto", "url": f"{url}/shop/{t}"},
                                               {"kind": "answer", "answer": "looked"}]}) for t in tables]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tasks.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    return folder / "tasks.jsonl"


def _shape(request: str) -> str:
    """``GET /shop/customers?_sort=*`` for ``GET http://127.0.0.1:N/shop/customers?_sort=city``."""
    method, _, url = request.partition(" ")
    parts = urlsplit(url)
    path = re.sub(r"\d+", "N", parts.path)
    query = "&".join(f"{k}=*" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return f"{method} {path}" + (f"?{query}" if query else "")


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2, choices=range(1, len(TABLES) + 1),
                    help="Tasks of the suite (one per table: " + ", ".join(TABLES) + ").")
    ap.add_argument("--agents", type=int, default=1, help="Fresh explorers; each runs the whole suite frozen.")
    ap.add_argument("--steps", type=int, default=3, help="Actions per explorer episode (recorded and fresh).")
    ap.add_argument("--recorded", default="0,1,2,4", help="Explorers merged into the snapshots, comma-separated.")
    ap.add_argument("--fanout", type=int, default=200,
                    help="A last row: the most explorers, sharing on, plus `record --fanout N`'s fetches (0: none).")
    ap.add_argument("--fanout-depth", type=int, default=2, help="The '+ words' fan-out row's depth.")
    ap.add_argument("--no-write", action="store_true", help="Print only; do not touch BENCHMARKS.md.")
    args = ap.parse_args()
    merges = sorted({int(k) for k in args.recorded.split(",")})
    tables = TABLES[:args.tasks]

    from ego2web_replay.agents.explorer import WORDS
    from ego2web_replay.models import ReplayConfig
    from ego2web_replay.proxy import project_ca
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.explore import ExploreOptions, merge_explorers, run_explorers
    from ego2web_replay.runner.fanout import fan_out
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks
    from ego2web_replay.testing.thirdparty import DatasetteSite, available
    from ego2web_replay.tracking.coverage import coverage_shares

    if not available("datasette"):
        sys.exit("bench_coverage: Datasette is not installed (pip install -e .[dev])")
    sharing = "share_window_s" in ReplayConfig.model_fields
    info = machine_info()
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-coverage-"))
    base_root, runs = work / "snapshots", work / "runs"
    common = {"timeout_s": 120, "action_timeout_s": 10, "guard": "loopback", "max_steps": 2 * args.steps + 2}
    rows, shapes, versions, best = [], Counter[str](), "", {}
    fanned: dict[str, dict[str, Any]] = {}  # fan-out row -> task -> FanoutResult
    with DatasetteSite(work / "app", setup=_more_tables) as app:
        suite = load_tasks(_suite(work / "suite", app.url, tables))
        bases = {}
        for task in suite:
            r = record_task(task, base_root, RecordOptions(guard="loopback"))
            assert r.ok and r.snapshot is not None, r.error
            bases[task.id] = r.snapshot
        explore = ExploreOptions(count=max(merges), seed=RECORD_SEED, steps=args.steps, runs=runs, guard="loopback",
                                 action_timeout_s=10, timeout_s=120)
        recorded = run_explorers(suite, list(bases), explore) if explore.count else []
        print(f"recorded: {len(bases)} tasks, {explore.count} explorers ({time.perf_counter() - t0:.0f} s)", flush=True)
        plans = [(k, "") for k in merges] + ([(merges[-1], "links"), (merges[-1], "words")] if args.fanout else [])
        grown: dict[str, Path] = {}
        for k, fan in plans:
            root = base_root if k == 0 and not fan else work / f"snapshots-k{k}{'-fanout-' + fan if fan else ''}"
            captures = 0
            for task_id, base in bases.items():
                snap = base
                if fan:
                    task = next(t for t in suite if t.id == task_id)
                    f = fan_out(task, grown.get(task_id, base), work / "fanout", RecordOptions(guard="loopback"),
                                ca=project_ca(), limit=args.fanout, window=timedelta(hours=1), root=root,
                                depth=1 if fan == "links" else args.fanout_depth,
                                words=WORDS if fan == "words" else ())
                    assert f.error is None, f.error
                    fanned.setdefault(fan, {})[task_id] = f
                    snap = f.extended.path if f.extended else grown.get(task_id, base)
                elif k:
                    got = merge_explorers(base, recorded[:k], task_id, timedelta(hours=1), root=root)
                    assert got.extended is not None, f"no explorer archive of {task_id}"
                    snap = grown[task_id] = got.extended.path
                captures += len(snap.joinpath("index.cdxj").read_text("utf-8").splitlines())
            if fan:
                print(f"fan-out {fan}: {_fanout_line(fanned[fan])}", flush=True)
            for share in ([True] if fan else [False, True] if sharing else [False]):
                replay = ReplayConfig(share_window_s=SHARE_WINDOW_S) if share else ReplayConfig()
                fresh = []
                for n in range(args.agents):
                    run_dir, _ = run_suite(suite, agent_name="explorer", agent_settings={"seed": n + 1, "steps": args.steps},
                                           out=runs, run_id=f"fresh-k{k}{'-' + fan if fan else ''}-{'share' if share else 'own'}-{n}",
                                           settings=RunSettings(mode="frozen", snapshots_root=str(root), replay=replay,
                                                                **common))
                    fresh.append(run_dir)
                report = coverage_shares(fresh)
                eps = sum(t.episodes for t in report)
                count = {c: sum(getattr(t, c) for t in report) for c in ("complete", "degraded", "off_snapshot", "shared")}
                missed, content = sum(t.content_misses for t in report), sum(t.content_requests for t in report)
                if (k, fan) == plans[-1] and share == sharing:
                    best = {"k": k, "share": share, "fan": fan, "eps": eps, "complete": count["complete"],
                            "degraded": count["degraded"], "missed": missed, "content": content}
                    for t in report:
                        for request, times in t.missed.items():
                            shapes[_shape(request)] += times
                pct = {c: f"{100 * count[c] / max(1, eps):.0f}%" for c in ("complete", "degraded", "off_snapshot")}
                fetched = sum(len(x.fetched) for x in fanned.get(fan, {}).values())
                rows.append([k, "on" if share else "off", f"{_FANOUT_NAMES[fan]}: {fetched} fetched" if fan else "off", captures, eps, pct["complete"], pct["degraded"],
                             pct["off_snapshot"], count["shared"], f"{missed}/{content} ({100 * missed / max(1, content):.0f}%)"])
                print(f"k={k} share={share}: {rows[-1]}", flush=True)
        versions = _datasette_version(app.url)
    header = ["explorers recorded", "suite sharing", "fan-out", "captures (suite)", "fresh episodes", "complete", "degraded",
              "off-snapshot", "shared answers", "content requests missed"]
    elapsed = time.perf_counter() - t0
    top = shapes.most_common(6)
    print(text_table(header, rows))
    print("most missed (by shape):", ", ".join(f"{s} ×{n}" for s, n in top))
    print(f"{elapsed:.0f} s; work folder {work}")
    if args.no_write:
        return
    missed_lines = "\n".join(f"- `{s}`: {n}" for s, n in top) or "- none"
    verdict = _verdict(best, sharing)
    print(verdict)
    body = f"""## Coverage that grows (`benchmarks/bench_coverage.py`)

Datasette {versions} (from PyPI) serves a SQLite shop on 127.0.0.1: {len(tables)} tasks, one per table
({", ".join(tables)}; 5 rows a page, foreign keys, full-text search on products), each recorded by its
reference path. The seeded `explorer` agent (random same-site clicks and searches, {args.steps} actions)
then ran the suite live {max(merges)} times (seeds {RECORD_SEED}..), as `record --explore` does, and each
row's snapshots hold the first k explorers' captures (window 1 h). {args.agents} fresh explorers (seeds
1..{args.agents}, never used to record) ran the whole suite frozen per row
({"with and without suite sharing, `--share-window 1h`" if sharing else "suite sharing not available in this build: own snapshots only"}).
{f'''The fan-out rows add, to the {max(merges)}-explorer snapshots, what `record --fanout {args.fanout}` fetches
through the recorder (documents only): "links", the same-site links and GET forms' default submissions of
the snapshot's documents it did not hold, one level deep ({_fanout_line(fanned["links"])}); "+ words,
depth {args.fanout_depth}", the same {args.fanout_depth} levels deep, each GET form also submitted with each
of the explorer's {len(WORDS)} vocabulary words in each text field (`--fanout-depth {args.fanout_depth}`
and `--fanout-word` for each: {_fanout_line(fanned["words"])}).''' if fanned else ""}
Complete: every document and content fetch came from the task's own snapshot or, with sharing, from
another task's recording of the same root within the window (a recorded response: counted as shared
answers, never silently); degraded: only subresources missed; off-snapshot: a document or content
fetch missed. Run as `bench_coverage.py {" ".join(sys.argv[1:])}`; the machine was shared
with other work while it ran (load averages below).

{markdown_table(header, rows)}

Most missed documents and content fetches in the target row (the last; shape: digits as N,
query values as *; count over all fresh episodes):

{missed_lines}

{verdict}

{machine_lines(info)}; {elapsed:.0f} s in all.
"""
    update_section("coverage", body)


def _verdict(best: dict[str, Any], sharing: bool) -> str:
    """The target (80% of fresh episodes complete, sharing on, 4 explorers recorded) against the last row,
    and what the measured per-request hit rate says would reach it."""
    if not best:
        return ""
    eps, content = max(1, best["eps"]), max(1, best["content"])
    complete, hit = best["complete"] / eps, 1 - best["missed"] / content
    per_episode = content / eps
    needed = 0.8 ** (1 / per_episode)
    row = (f"{best['k']} explorers recorded, sharing {'on' if best['share'] else 'off (not available)'}"
           + (f", fan-out {_FANOUT_NAMES[best['fan']]}" if best.get("fan") else ""))
    sample = f"{best['complete']} of {best['eps']} fresh episodes"
    if complete >= 0.8:
        return (f"**Target (80% of fresh explorer episodes complete with sharing and 4 recorded explorers): met** "
                f"({100 * complete:.0f}%, {sample}, with {row}; {100 * hit:.0f}% of their {best['content']} "
                "documents and content fetches held). A small sample (one episode is "
                f"{100 / eps:.0f} points), and the '+ words' fan-out submitted the forms with the very vocabulary "
                "the fresh explorers type; for agents that type other words, `--fanout-word` must name those "
                "(a task's own keywords, say). Without fan-out the explorers alone left every episode off the "
                "snapshot (the rows above): random recorded explorers sample the pages one click or one word "
                "away, the fan-out records them.")
    return (f"**Target (80% of fresh explorer episodes complete with sharing and 4 recorded explorers): not met** "
            f"({100 * complete:.0f}% complete ({sample}), {100 * (complete + best['degraded'] / eps):.0f}% complete "
            f"or degraded, with {row}). A fresh episode sent {per_episode:.1f} documents and content fetches on "
            f"average and {100 * hit:.0f}% of them were held; an episode is complete only when all of them are, so "
            f"80% complete needs about {100 * needed:.0f}% of them held. What is left are the shapes above: pages "
            "past the fan-out's depth or limit (candidates past the limit are counted above), or form submissions "
            "with words no `--fanout-word` named. What would reach it: a larger `--fanout` limit or depth for the "
            "shapes that are links, and the agents' search words as `--fanout-word` for those that are searches.")


_FANOUT_NAMES = {"links": "links", "words": "+ words, deeper"}


def _fanout_line(per_task: dict[str, Any]) -> str:
    return ", ".join(f"{t}: {len(x.fetched)} of {x.candidates} candidates fetched, {len(x.failed)} failed, "
                     f"{x.left_out} past the limit" for t, x in per_task.items())


def _datasette_version(url: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/-/versions.json", timeout=10) as r:
            return str(json.loads(r.read())["datasette"]["version"])
    except (OSError, ValueError, KeyError):
        return "(version unknown)"


if __name__ == "__main__":
    main()
