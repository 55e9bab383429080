"""Labelled drift cases through the whole pipeline, on real third-party web apps on 127.0.0.1.

Each case is a task on a real application (Datasette, MkDocs, a Flask shop behind Flask-Login),
recorded through the recording proxy with Chromium; then the application drifts (its data changes,
a page is removed and the host falls back to MkDocs' 404 page with status 200, a sign-in wall goes up,
the site goes down), the scripted agent runs the task live and frozen, the rule judge judges both,
everything is tracked in a DuckDB file, and ``compare`` attributes the live/frozen flip. One control
case does not drift at all: a fallible agent (a program run by the command agent) answers a Datasette
row page wrongly in its live run only, so its flip is the agent's own, on an unchanged site (whose
pages still differ in volatile content: Datasette's query timings). The label is the attribution a
person gives the flip; :func:`run_pipeline_cases` returns what the pipeline said,
with the task status of a drift probe taken after the drift beside it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PipelineCase", "PipelineOutcome", "PIPELINE_CASES", "run_pipeline_cases"]


@dataclass(frozen=True)
class PipelineCase:
    """One task on a real app, the drift it undergoes, and the attribution a person gives its flip."""

    id: str
    kind: str
    label: str


@dataclass
class PipelineOutcome:
    """What the pipeline said about one case."""

    case: PipelineCase
    status: str = "no flip"  # the flip's drift status; "no flip" when the task did not flip
    source: str = "none"
    detail: str = ""
    attribution: Any = None  # the flip's :class:`~ego2web_replay.tracking.attribution.Attribution`
    probe_status: str | None = None
    probe_urls: dict[str, str] = field(default_factory=dict)  # URL -> its status in the probe

    @property
    def correct(self) -> bool:
        return self.status == self.case.label


PIPELINE_CASES = [
    PipelineCase("datasette-json-price", "a price changed only in the JSON a static page fetches (Datasette)",
                 "changed"),
    PipelineCase("flask-login-wall", "a sign-in wall: Flask-Login redirects the item page to its sign-in form",
                 "blocked"),
    PipelineCase("mkdocs-soft-404", "a page removed; the host answers 200 with MkDocs' 404 page (soft 404)", "gone"),
    PipelineCase("mkdocs-unreachable", "the MkDocs site is down (connection refused)", "unreachable"),
    PipelineCase("datasette-agent-mistake", "no drift: the agent itself answers wrongly live (Datasette row page)",
                 "unchanged"),
]

# the control's agent: reads the page through the proxy it is given; live, it reports a wrong price
_FALLIBLE_AGENT = """
import json, os, re, urllib.request
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
url = task["start_url"]
with urllib.request.urlopen(url, timeout=30) as r:
    text = " ".join(re.sub("<[^>]+>", " ", r.read().decode()).split())
answer = "$1.00" if os.environ["EGO2WEB_MODE"] == "live" else "$240.00"
out = {"steps": [{"index": 0, "action": {"kind": "goto", "url": url}, "url": url}], "answer": answer,
       "final_page_text": text[:20000]}
json.dump(out, open(os.path.join(os.environ["EGO2WEB_OUT"], "trajectory.json"), "w"))
"""

_PRICE_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Price check</title></head><body>
<h1 id="name">Product</h1><p>Price: <span id="price">loading</span></p>
<script>
fetch('/shop/products/6.json?_shape=array').then(r => r.json()).then(rows => {
  document.getElementById('name').textContent = rows[0].name;
  document.getElementById('price').textContent = '$' + rows[0].price.toFixed(2);
  document.body.dataset.ready = '1';
});
</script></body></html>
"""


def _task(task_id: str, url: str, answer: str, cues: list[str], ready: dict[str, Any]) -> dict[str, Any]:
    return {"id": task_id, "category": "drift", "instruction": f"Open {url} and report what it says.",
            "start_url": url, "allowed_domains": ["127.0.0.1"], "must_match": cues, "expected_answer": answer,
            "reference_actions": [{"kind": "goto", "url": url}, {"kind": "wait", **ready},
                                  {"kind": "answer", "answer": answer}]}


def run_pipeline_cases(work: Path, *, workers: int = 2, probe: bool = True) -> list[PipelineOutcome]:
    """Build the apps under ``work``, record, drift, run live and frozen, judge, track and compare."""
    from ..judge.run import judge_run
    from ..models import RunSettings
    from ..recorder.session import RecordOptions, record_task
    from ..runner.run import run_suite
    from ..tasks import load_tasks
    from ..tracking.compare import compare
    from ..tracking.probe import probe_snapshots
    from ..tracking.sink import TrackingSink
    from .thirdparty import DatasetteSite, MkDocsSite, SignInSite

    work = Path(work)
    assets = work / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    (assets / "price.html").write_text(_PRICE_PAGE, "utf-8")
    db, snapshots = work / "ego2web.duckdb", work / "snapshots"
    sink = TrackingSink(db)
    datasette = DatasetteSite(work / "datasette", static=assets)
    docs, down = MkDocsSite(work / "mkdocs-a", not_found_status=200), MkDocsSite(work / "mkdocs-b")
    shop = SignInSite()
    outcomes = {c.id: PipelineOutcome(c) for c in PIPELINE_CASES}
    with datasette, docs, shop:
        down.start()
        try:
            tasks = [
                _task("datasette-json-price", f"{datasette.url}/assets/price.html", "$39.00",
                      ["coffee grinder", "$39.00"], {"selector": "body[data-ready]"}),
                _task("flask-login-wall", f"{shop.url}/item/7", "$75.00", ["pine chair", "$75.00"], {"seconds": 0.3}),
                _task("mkdocs-soft-404", f"{docs.url}/coverage/", "merging live runs",
                      ["Grow a snapshot by merging live runs"], {"seconds": 0.3}),
                _task("mkdocs-unreachable", f"{down.url}/matching/", "matched exactly",
                      ["A request is matched exactly"], {"seconds": 0.3}),
                _task("datasette-agent-mistake", f"{datasette.url}/shop/products/3", "$240.00", ["oak table"],
                      {"seconds": 0.3}),
            ]
            suite_file = work / "tasks.jsonl"
            suite_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), "utf-8")
            suite = load_tasks(suite_file)
            recorded = []
            for task in suite:
                r = record_task(task, snapshots, RecordOptions(guard="loopback"))
                if not r.ok or r.snapshot is None:
                    raise RuntimeError(f"recording {task.id} failed: {r.error}")
                sink.snapshot_recorded(r.snapshot)
                recorded.append(r.snapshot)
            # the drift
            datasette.execute("UPDATE products SET price = 44.0 WHERE id = 6")
            docs.remove_page("coverage.md")
            shop.walled = True
            down.stop()
            settings = RunSettings(mode="both", workers=workers, snapshots_root=str(snapshots), guard="loopback",
                                   timeout_s=120)
            hooks: dict[str, Any] = {"on_start": lambda d, total, done: sink.run_started(d),
                                     "on_episode": lambda s: sink.episode_finished(s.path.parents[2], s.path)}
            agent = work / "fallible_agent.py"
            agent.write_text(_FALLIBLE_AGENT, "utf-8")
            control = ["datasette-agent-mistake"]
            runs = [run_suite(suite, agent_name="scripted", out=work / "runs", settings=settings, run_id="drifted",
                              task_ids=[t.id for t in suite if t.id not in control], **hooks)[0],
                    run_suite(suite, agent_name=f"command:{sys.executable} {agent}", out=work / "runs",
                              settings=settings, run_id="agent", task_ids=control, **hooks)[0]]
            for run_dir in runs:
                judge_run(run_dir, "rule", progress=False,
                          on_verdict=lambda ep, v: sink.verdict_made(ep, v, judge="rule"))
            if sink.error is not None:
                raise RuntimeError(f"tracking failed: {sink.error}")
            if probe:
                _, rows = probe_snapshots(recorded, archive_root=work / "probes", guard="loopback", timeout=5)
                for row in rows:
                    outcomes[row.task_id].probe_status = row.task_status
                    outcomes[row.task_id].probe_urls[row.url] = row.url_status
        finally:
            down.stop()
    for group in compare(db, iterations=50).groups:
        for flip in group.flips:
            out = outcomes[flip.task_id]
            a = flip.attribution
            out.status, out.source, out.attribution = flip.drift_status, a.source if a else "none", a
            cause = a.resources[0] if a and a.resources else None
            out.detail = f"{cause.status} {cause.url}: {cause.detail}" if cause else (a.note or "") if a else ""
    return list(outcomes.values())
