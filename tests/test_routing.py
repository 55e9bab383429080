"""Route by destination (agents/routing.py): a program agent's own services (its model endpoint, the CDP port
of the browser it is given) never go through the proxy, whatever their address, while the site does and
every other address stays sealed."""

from __future__ import annotations

import json
import sys

import pytest

from ego2web_replay.agents.routing import (
    Destination,
    OwnService,
    parse_destination,
    plan_routing,
    site_destinations,
    snapshot_destinations,
)
from ego2web_replay.errors import AgentError
from ego2web_replay.models import load_trajectory
from ego2web_replay.runner.run import RunSettings, run_suite
from ego2web_replay.snapshots.index_cache import stream_rows
from ego2web_replay.testing.openai_server import FakeOpenAIServer

MUG = "shop-mug-price"


def test_destinations_are_host_and_port_and_loopback_names_share_a_socket():
    assert parse_destination("http://127.0.0.1:8000/v1") == Destination("127.0.0.1", 8000)
    assert parse_destination("https://api.example.com/v1") == Destination("api.example.com", 443)
    assert str(parse_destination("http://[::1]:9/x")) == "[::1]:9"
    assert parse_destination("localhost:9222").same_socket(Destination("127.0.0.1", 9222))
    assert not Destination("127.0.0.1", 8000).same_socket(Destination("127.0.0.1", 8001))
    assert not Destination("example.com", 80).same_socket(Destination("127.0.0.1", 80))
    with pytest.raises(AgentError, match="not a service address"):
        parse_destination("no-port-here")
    assert site_destinations("http://127.0.0.1:5000/shop", ["127.0.0.1:5000", "*.wiki.org"]) == [
        Destination("127.0.0.1", 5000), Destination("wiki.org", 80), Destination("wiki.org", 443)]


def test_no_proxy_names_each_own_service_exactly_and_a_collision_is_refused_in_one_line():
    site = [Destination("127.0.0.1", 5000)]
    model = OwnService(Destination("127.0.0.1", 8000), "model endpoint (--base-url)")
    routing = plan_routing(site, [model, model])
    assert routing.no_proxy() == "127.0.0.1:8000"  # never the bare host: the site shares it
    assert routing.record()["direct"] == [{"address": "127.0.0.1:8000", "what": "model endpoint (--base-url)"}] * 2
    clash = OwnService(Destination("localhost", 5000), "service (--agent-service)")
    with pytest.raises(AgentError) as e:
        plan_routing(site, [clash])
    assert "\n" not in str(e.value) and "localhost:5000" in str(e.value) and "127.0.0.1:5000" in str(e.value)


@pytest.fixture()
def frozen_shop(frozen_mug):
    """The mug task recorded from the demo site on 127.0.0.1, which is then stopped."""
    return {**frozen_mug, "site": parse_destination(frozen_mug["site_url"])}


def _frozen(shop, **kw) -> RunSettings:
    return RunSettings(mode="frozen", snapshots_root=str(shop["snapshots"]), guard="loopback", timeout_s=90, **kw)


# The model through the OpenAI SDK (httpx: it honours NO_PROXY's host:port), the site and a third loopback
# port through urllib (the proxy variables): what each got is written into the trajectory.
MODEL_AND_SITE = r'''
import json, os, sys, urllib.error, urllib.request
from openai import OpenAI

task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
client = OpenAI(api_key="none")  # $OPENAI_BASE_URL, from --base-url
answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["instruction"]}])
with urllib.request.urlopen(task["start_url"], timeout=20) as r:
    page = r.read().decode()
try:
    with urllib.request.urlopen(sys.argv[1], data=b"{}", timeout=20) as r:
        third = r.status
except urllib.error.HTTPError as e:
    third = e.code
json.dump({"answer": answer.choices[0].message.content, "end_reason": "answered",
           "steps": [{"index": 0, "action": {"kind": "answer", "answer": answer.choices[0].message.content}}],
           "extra": {"page_has_mug": "Red Ceramic Mug" in page, "third": third,
                     "no_proxy": os.environ["NO_PROXY"]}},
          open(os.path.join(os.environ["EGO2WEB_OUT"], "trajectory.json"), "w"))
'''


@pytest.mark.slow
def test_model_endpoint_beside_the_site_on_loopback_is_answered_and_a_third_port_stays_sealed(frozen_shop, tmp_path):
    program = tmp_path / "agent.py"
    program.write_text(MODEL_AND_SITE, "utf-8")
    with FakeOpenAIServer(["$12.99"]) as model, FakeOpenAIServer(["never"]) as third:
        model_at, third_at = parse_destination(model.base_url), parse_destination(third.base_url)
        third_url = f"{third.base_url}/chat/completions"
        assert model_at.host == third_at.host == frozen_shop["site"].host == "127.0.0.1"
        _, (r,) = run_suite(frozen_shop["suite"], out=tmp_path / "runs", settings=_frozen(frozen_shop),
                            agent_name=f"command:{sys.executable} {program} {third_url}",
                            agent_settings={"base_url": model.base_url})
        got_model, got_third = list(model.requests), list(third.requests) + [None] * third.model_lists
    traj = load_trajectory(r.path)
    assert r.ok and traj.answer == "$12.99", (r.error, traj.extra.get("stderr"))
    assert len(got_model) == 1  # answered by the model endpoint itself: no miss, no 404
    assert traj.extra["page_has_mug"] and traj.replay.exact >= 1  # the site came from the snapshot
    # the third port: through the replay (a counted miss, its 404), and the server there got nothing
    assert got_third == [] and traj.extra["third"] == 404
    assert traj.replay.missed_urls == [f"POST {third_url}"]
    assert traj.extra["no_proxy"] == str(model_at)
    routing = traj.extra["routing"]
    assert routing["direct"] == [{"address": str(model_at), "what": "model endpoint (--base-url)"}]
    assert routing["proxied_from"] == "snapshot" and str(frozen_shop["site"]) in routing["proxied"]
    assert "own_services_proxied" not in routing


@pytest.mark.slow
def test_a_client_that_ignores_host_port_entries_is_shown_not_silent(frozen_shop, tmp_path):
    """curl ignores the port in NO_PROXY: its call to the model endpoint reaches the replay, and the
    trajectory says so."""
    with FakeOpenAIServer(["$12.99"]) as model:
        model_url = f"{model.base_url}/chat/completions"
        program = (f"curl -s -o /dev/null -X POST -d '{{}}' {model.base_url}/chat/completions; "
                   "echo unsure > $EGO2WEB_OUT/answer.txt")
        _, (r,) = run_suite(frozen_shop["suite"], out=tmp_path / "runs", settings=_frozen(frozen_shop),
                            agent_name=f"command:{program}", agent_settings={"base_url": model.base_url})
        assert model.requests == []
    traj = load_trajectory(r.path)
    assert traj.extra["routing"]["own_services_proxied"] == [f"POST {model_url}"]
    assert any("own services went to the replay" in n for n in traj.extra["notes"])


@pytest.mark.slow
def test_an_own_service_on_the_snapshot_s_address_is_refused(frozen_shop, tmp_path):
    site = frozen_shop["site"]
    _, (r,) = run_suite(frozen_shop["suite"], out=tmp_path / "runs", settings=_frozen(frozen_shop),
                        agent_name="command:echo never > $EGO2WEB_OUT/answer.txt",
                        agent_settings={"services": [f"localhost:{site.port}"]})
    assert r.end_reason == "setup_error"
    assert r.error.startswith(f"the agent's service (--agent-service) localhost:{site.port} is also an address "
                              f"the snapshot holds ({site})")
    assert snapshot_destinations(row[2] for row in stream_rows(next(frozen_shop["snapshots"].glob("*/*/index.cdxj")))) == [site]


# A plain browser-use script: no ego2web helper, only the browser it is given.
PLAIN_BROWSER_USE = r'''
import asyncio, json, os
from browser_use import BrowserSession

async def main():
    task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
    session = BrowserSession(cdp_url=os.environ["EGO2WEB_CDP_URL"])
    await session.start()  # /json/version (httpx) and the CDP websocket (websockets): both honour NO_PROXY
    await session.navigate_to(task["start_url"])
    cdp = await session.get_or_create_cdp_session(focus=False)
    for _ in range(50):
        reply = await cdp.cdp_client.send.Runtime.evaluate(params={"expression": "document.body.innerText",
                                                                   "returnByValue": True}, session_id=cdp.session_id)
        text = reply["result"].get("value") or ""
        if "Mug" in text:
            break
        await asyncio.sleep(0.2)
    open(os.path.join(os.environ["EGO2WEB_OUT"], "answer.txt"), "w").write("Red Ceramic Mug" in text and "mug" or text)
    await session.kill()

asyncio.run(main())
'''


@pytest.mark.slow
def test_plain_browser_use_script_connects_to_the_given_browser_without_a_403(frozen_shop, tmp_path, monkeypatch):
    pytest.importorskip("browser_use")
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "false")
    monkeypatch.setenv("BROWSER_USE_VERSION_CHECK", "false")
    program = tmp_path / "plain.py"
    program.write_text(PLAIN_BROWSER_USE, "utf-8")
    _, (r,) = run_suite(frozen_shop["suite"], out=tmp_path / "runs", settings=_frozen(frozen_shop),
                        agent_name=f"command:{sys.executable} {program}", agent_settings={"browser": True})
    traj = load_trajectory(r.path)
    stderr = traj.extra.get("stderr") or ""
    assert "403" not in stderr and r.ok and traj.answer == "mug", (r.error, stderr[-2000:])
    assert traj.replay.exact >= 1  # the page, from the snapshot
    # the only misses: browser-use's own animation on about:blank loads its logo (browser_use_main turns it off)
    assert all(u.startswith("GET https://cf.browser-use.com/") for u in traj.replay.missed_urls), traj.replay
    (cdp,) = traj.extra["routing"]["direct"]
    assert cdp["what"].startswith("DevTools endpoint") and parse_destination(cdp["address"]).host == "127.0.0.1"
    assert json.loads(json.dumps(traj.extra["routing"]))["proxied"] == [str(frozen_shop["site"])]


@pytest.mark.slow
def test_live_routes_around_the_task_s_sites_and_names_own_calls_the_recording_proxy_archived(frozen_shop, tmp_path):
    """Live: the proxied destinations are the task's sites; curl's model call goes through the recording
    proxy (it ignores the port in NO_PROXY) and the trajectory says it is in the live archive."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.tasks import load_tasks

    with DemoSite() as site, FakeOpenAIServer(["$12.99"]) as model:
        suite = load_tasks(write_demo_suite(tmp_path / "suite", site.url, [MUG]))
        model_url = f"{model.base_url}/chat/completions"
        program = f"curl -s -X POST -d '{{}}' {model_url} > /dev/null; echo '$12.99' > $EGO2WEB_OUT/answer.txt"
        _, (r,) = run_suite(suite, out=tmp_path / "runs", agent_name=f"command:{program}",
                            settings=RunSettings(mode="live", guard="loopback", timeout_s=60),
                            agent_settings={"base_url": model.base_url})
        site_at, model_at = parse_destination(site.url), parse_destination(model.base_url)
        assert len(model.requests) == 1  # forwarded by the recording proxy: loopback is allowed live
    traj = load_trajectory(r.path)
    routing = traj.extra["routing"]
    assert routing["proxied_from"] == "task" and str(site_at) in routing["proxied"]
    assert str(model_at) not in routing["proxied"]
    assert routing["own_services_proxied"] == [f"http://{model_at}/"]
    assert any("in the live archive" in n for n in traj.extra["notes"])
