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


@pytest.fixture()
def frozen_demo(frozen_mug):
    """The mug task recorded from the demo site, which is then stopped."""
    return frozen_mug


@pytest.mark.parametrize("given", [False, True], ids=["own-chromium", "given-browser"])
def test_cdp_command_agent_with_a_loopback_llm_runs_frozen_with_no_miss(frozen_demo, tmp_path, given):
    """The model endpoint on 127.0.0.1, like the site, on another port: given with --base-url, it is
    reached directly; the CDP socket is the program's own port or the given browser's."""
    suite, start = frozen_demo["suite"], frozen_demo["suite"].get(MUG).start_url
    actions = [{"action": "goto", "url": start}, {"action": "click", "text": "Red Ceramic Mug"},
               {"action": "answer", "answer": "$12.99"}]
    with FakeOpenAIServer([json.dumps(a) for a in actions]) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:") and start.startswith("http://127.0.0.1:")
        agent = f"command:{sys.executable} -m ego2web_replay.testing.cdp_agent"
        settings = RunSettings(mode="frozen", snapshots_root=str(frozen_demo["root"] / "snapshots"), guard="loopback",
                               timeout_s=120)
        _, (r,) = run_suite(suite, agent_name=agent, out=tmp_path / "runs", settings=settings,
                            agent_settings={"base_url": srv.base_url, "browser": given})
        requests, model_at = list(srv.requests), srv.base_url.split("/")[2]
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
    direct = [d["address"] for d in traj.extra["routing"]["direct"]]
    assert direct[0] == model_at and len(direct) == (2 if given else 1)
