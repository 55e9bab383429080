"""A ``command:`` agent that launches its own Chromium, drives it over CDP and asks a loopback LLM endpoint
for each action (``ego2web_replay.testing.cdp_agent``), run frozen with the site stopped: every page
comes from the snapshot, and neither its CDP socket nor its model calls reach the replay."""

from __future__ import annotations

import json
import sys

import pytest

from ego2web_replay.models import load_trajectory
from ego2web_replay.runner.run import RunSettings, run_suite
from ego2web_replay.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.slow

MUG = "shop-mug-price"


@pytest.fixture(scope="module")
def frozen_demo(tmp_path_factory, ca):
    """The mug task recorded from the demo site, which is then stopped."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import load_tasks

    root = tmp_path_factory.mktemp("cdp")
    with DemoSite() as site:
        suite = load_tasks(write_demo_suite(root / "suite", site.url, [MUG]))
        r = record_task(suite.get(MUG), root / "snapshots", RecordOptions(guard="loopback"), ca=ca)
        assert r.ok, r.error
        url = site.url
    return {"root": root, "suite": suite, "site_url": url}


def test_cdp_command_agent_with_a_loopback_llm_runs_frozen_with_no_miss(frozen_demo, tmp_path):
    suite, start = frozen_demo["suite"], frozen_demo["suite"].get(MUG).start_url
    actions = [{"action": "goto", "url": start}, {"action": "click", "text": "Red Ceramic Mug"},
               {"action": "answer", "answer": "$12.99"}]
    with FakeOpenAIServer([json.dumps(a) for a in actions]) as srv:
        llm = srv.base_url.replace("127.0.0.1", "localhost")  # NO_PROXY names localhost for the agent's services
        agent = f"command:{sys.executable} -m ego2web_replay.testing.cdp_agent {llm}"
        settings = RunSettings(mode="frozen", snapshots_root=str(frozen_demo["root"] / "snapshots"), guard="loopback",
                               timeout_s=120)
        _, (r,) = run_suite(suite, agent_name=agent, out=tmp_path / "runs", settings=settings)
        requests = list(srv.requests)
    traj = load_trajectory(r.path)
    assert r.ok and traj.answer == "$12.99", (r.error, traj.extra.get("stderr"))
    assert len(requests) == 3  # every model call reached the endpoint (none went to the replay)
    # the page the model saw came from the snapshot: the shop, then the mug's page
    seen = [json.loads(b["messages"][1]["content"])["page"] for b in requests]
    assert seen[1]["url"] == start and "Red Ceramic Mug" in seen[1]["text"]
    assert "$12.99" in seen[2]["text"] and traj.steps[1].url != start
    assert all((r.path / s.screenshot).is_file() for s in traj.steps if s.screenshot)
    # no miss: neither the CDP socket nor the model calls are counted, and no page was missing
    assert traj.replay.miss == 0 and traj.replay.missed_urls == [], traj.replay
    assert traj.replay.exact >= 2
