"""A BrowserGym agent on an ego2web-replay task, live and then frozen with the site stopped.

    PYTHONPATH=. .venv/bin/python examples/browsergym_demo.py [OUT]

Starts the bundled demo site, registers its ``shop-mug-price`` task as
``browsergym/ego2web.shop-mug-price``, runs a scripted agent in BrowserGym's own
action space live (through the recording proxy), stops the site, runs it again
frozen from the live episode's archive, judges both episodes with the offline rule
judge and prints what happened. Swap the agent for an AgentLab one (docs/agents.md,
"AgentLab") to evaluate a model the same way.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import gymnasium as gym

from ego2web_replay.browsergym import register
from ego2web_replay.demo.run import write_demo_suite
from ego2web_replay.demo.site import DemoSite
from ego2web_replay.judge import judge_run
from ego2web_replay.models import episode_dir, load_trajectory
from ego2web_replay.testing.browsergym_agent import LinkThenAnswerAgent, run_agent

TASK = "shop-mug-price"


def main(out: Path) -> None:
    site = DemoSite().start()
    suite = write_demo_suite(out / "suite", site.url, [TASK])
    try:
        (live,) = register(suite, mode="live", out=out / "runs", run_id="browsergym-demo", guard="loopback")
        run_agent(gym.make(live), LinkThenAnswerAgent("Red Ceramic Mug", r"\$\d+\.\d\d"))
    finally:
        site.stop()  # from here on the site is gone: frozen must not need it
    run_dir = out / "runs" / "browsergym-demo"
    snapshots = episode_dir(run_dir, TASK, "live") / "snapshots"
    (frozen,) = register(suite, snapshots=snapshots, mode="frozen", out=out / "runs", run_id="browsergym-demo")
    run_agent(gym.make(frozen), LinkThenAnswerAgent("Red Ceramic Mug", r"\$\d+\.\d\d"))
    judge_run(run_dir, "rule", progress=False)
    for mode in ("live", "frozen"):
        traj = load_trajectory(episode_dir(run_dir, TASK, mode))
        misses = f", {traj.replay.miss} misses of {traj.replay.total} requests" if traj.replay else ""
        print(f"{mode}: {traj.end_reason}, answer {traj.answer!r} in {len(traj.steps)} steps{misses}")
    print(f"run folder: {run_dir}  (ego2web-replay runs show {run_dir})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="browsergym-demo-")))
