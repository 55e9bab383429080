"""Which render `runs export --format mind2web2-cache` keeps, and what it leaves out and says so, on hand-made
episodes (pages without a screenshot, an unreadable screenshot, repeats that saw different text, an episode
that could not run). The real-browser episodes are in test_mind2web2_export.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ego2web_replay.cli import main
from ego2web_replay.models import (
    Action,
    AgentSpec,
    PageCapture,
    Step,
    Trajectory,
    episode_dir,
    save_model,
)
from ego2web_replay.png import png_bytes
from ego2web_replay.testing.episodes import make_run_manifest

A, B, C = "http://127.0.0.1:9/a", "http://127.0.0.1:9/b", "http://127.0.0.1:9/c%20d/"


def _episode(run: Path, repeat: int, pages: list[tuple[str, str, bytes | None]], answer: str | None,
             end_reason: str = "answered") -> None:
    """One frozen episode: per (url, text, screenshot bytes or None) a goto step with its capture, then the answer."""
    ep = episode_dir(run, "t1", "frozen", repeat)
    (ep / "pages").mkdir(parents=True)
    (ep / "screenshots").mkdir()
    steps = []
    for i, (url, text, shot) in enumerate(pages):
        rel = None
        if shot is not None:
            rel = f"screenshots/step-{i:03d}.png"
            (ep / rel).write_bytes(shot)
        save_model(ep / f"pages/step-{i:03d}.json", PageCapture(step=i, url=url, text=text))
        steps.append(Step(index=i, action=Action(kind="goto", url=url), url=url, screenshot=rel,
                          page=f"pages/step-{i:03d}.json"))
    if answer is not None:
        i = len(steps)
        save_model(ep / f"pages/step-{i:03d}.json", PageCapture(step=i, url=pages[-1][0], text=pages[-1][1]))
        steps.append(Step(index=i, action=Action(kind="answer", answer=answer), url=pages[-1][0],
                          page=f"pages/step-{i:03d}.json"))
    save_model(ep / "trajectory.json", Trajectory(task_id="t1", mode="frozen", repeat=repeat, agent=AgentSpec(name="x"),
                                                  steps=steps, answer=answer, end_reason=end_reason))  # type: ignore[arg-type]


def test_the_last_render_with_a_screenshot_is_kept_and_everything_else_is_listed(tmp_path):
    run = tmp_path / "run"
    make_run_manifest(run, agent="my agent")
    red, blue = png_bytes(8, 8, (255, 0, 0)), png_bytes(8, 8, (0, 0, 255))
    _episode(run, 0, [(A, "A as first seen", red), (B, "B, never photographed", None)], "first")
    _episode(run, 1, [(A + "#x", "A as seen again", blue), (C, "C", b"not an image")], "second")
    _episode(run, 2, [(A, "A from an episode that could not run", red)], None, end_reason="setup_error")
    out = tmp_path / "m2w"
    assert main(["runs", "export", str(run), "--out", str(out), "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text("utf-8"))
    assert summary["agent_name"] == "my-agent" and summary["mode"] == "frozen"
    assert summary["counts"] == {"tasks": 1, "pages": 1, "answers": 2, "left_out": 2, "skipped_episodes": 1,
                                 "replaced_renders": 1}
    task = summary["tasks"][0]
    assert [(p["key"], p["repeat"], p["text_step"], p["screenshot_step"]) for p in task["cached"]] == [(A, 1, 0, 0)]
    left = {(d["url"], d["repeat"]): d["reason"] for d in task["left_out"]}
    assert set(left) == {(B, 0), (C, 1)}
    assert "no screenshot" in left[(B, 0)] and "not a readable PNG" in left[(C, 1)]
    assert task["skipped_episodes"] == [{"episode": "episodes/t1/frozen-r2",
                                         "reason": "episode error (setup_error): it could not run"}]
    folder = out / "cache" / "my-agent" / "t1"
    assert json.loads((folder / "index.json").read_text("utf-8")) == {A: "web"}
    stem = hashlib.md5(A.encode()).hexdigest()
    assert sorted(p.name for p in folder.iterdir()) == sorted(["index.json", f"{stem}.txt", f"{stem}.jpg"])
    assert (folder / f"{stem}.txt").read_text("utf-8") == "A as seen again"
    assert (folder / f"{stem}.jpg").read_bytes()[:2] == b"\xff\xd8"
    assert sorted(p.name for p in (out / "answers" / "my-agent" / "t1").iterdir()) == ["answer_1.md", "answer_2.md"]


def test_a_url_is_stored_under_mind2web2s_key_and_file_name(tmp_path):
    run = tmp_path / "run"
    make_run_manifest(run)
    jpeg = b"\xff\xd8\xff\xe0" + b"\x00" * 16 + b"\xff\xd9"  # a JPEG screenshot is copied as it is
    _episode(run, 0, [(C + "#frag", "C page", jpeg)], None)
    assert main(["runs", "export", str(run), "--out", str(tmp_path / "m2w")]) == 0
    folder = tmp_path / "m2w" / "cache" / "scripted" / "t1"
    key = "http://127.0.0.1:9/c d"  # no fragment, percent-decoded, no trailing slash
    assert json.loads((folder / "index.json").read_text("utf-8")) == {key: "web"}
    stem = hashlib.md5(key.encode()).hexdigest()
    assert (folder / f"{stem}.jpg").read_bytes() == jpeg
    assert not (tmp_path / "m2w" / "answers" / "scripted" / "t1").exists()  # no answer, no answer folder
