"""The evidence firewall and the four input modalities: what an agent is actually sent.

The task's 8-second video is grey except its annotated evidence range
(00:06-00:08), which is magenta. A local OpenAI-compatible server records every
request the openai agent makes; the frames in them must come from the whole
video, and nothing the judge alone should read may appear in them.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import av
import pytest

from ego2web_replay.media.captions import captions_path, generate_captions
from ego2web_replay.models import episode_dir, load_trajectory
from ego2web_replay.runner.inputs import InputSettings, agent_task, prepare_inputs
from ego2web_replay.tasks import load_tasks
from ego2web_replay.testing.episodes import make_video
from ego2web_replay.testing.openai_server import FakeOpenAIServer

GREY, MAGENTA = (128, 128, 128), (255, 0, 255)
SECRETS = ("SECRET-ANSWER", "SECRET-KEYPOINT", "SECRET-CUE", "00:06", "SECRET-PATTERN")
CAPTION = {"summary": "a person holds a magenta mug", "objects": ["mug"], "actions": ["holding"],
           "text_seen": [], "brands": ["Acme"], "colours": ["magenta"]}


def _suite(folder: Path, start_url: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    make_video(folder / "clip.mp4", seconds=8, colours=[GREY] * 6 + [MAGENTA] * 2)
    task = {"id": "firewall", "instruction": "Find the price of the object I am holding.", "start_url": start_url,
            "allowed_domains": ["127.0.0.1"], "video": "clip.mp4", "evidence": ["00:06-00:08"],
            "expected_answer": "SECRET-ANSWER", "key_points": ["SECRET-KEYPOINT"], "must_match": ["SECRET-CUE"],
            "answer_patterns": ["SECRET-PATTERN"]}
    (folder / "tasks.json").write_text(json.dumps([task]), "utf-8")
    return folder / "tasks.json"


def _colour(data_url: str) -> tuple[int, int, int]:
    raw = base64.b64decode(data_url.split(",", 1)[1])
    with av.open(io.BytesIO(raw), "r") as c:
        arr = next(c.decode(video=0)).to_ndarray(format="rgb24").reshape(-1, 3).mean(axis=0)
    return tuple(int(round(v)) for v in arr)


def _near(a, b, tol=40) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def test_agent_task_clears_judge_only_fields(tmp_path):
    suite = load_tasks(_suite(tmp_path, "http://127.0.0.1:9/"))
    seen = agent_task(suite.tasks[0]).model_dump_json()
    assert not any(s in seen for s in SECRETS) and '"evidence":[]' in seen and '"video":null' in seen


def test_prepare_inputs_samples_the_whole_video(tmp_path):
    suite = load_tasks(_suite(tmp_path, "http://127.0.0.1:9/"))
    task = suite.tasks[0]
    kf = prepare_inputs(task, suite.base_dir, "keyframes", InputSettings(keyframes=4))
    assert [t for t, _ in kf.frames] == [1.0, 3.0, 5.0, 7.0]  # the centres of four equal parts
    dense = prepare_inputs(task, suite.base_dir, "video", InputSettings(video_fps=0.5))
    assert len(dense.frames) == 4 and dense.video == tmp_path / "clip.mp4"
    url = prepare_inputs(task, suite.base_dir, "video", InputSettings(video_transport="video_url"))
    assert url.frames == [] and url.video == tmp_path / "clip.mp4"
    assert prepare_inputs(task, suite.base_dir, "none", InputSettings()).record()["frames"] == []
    with pytest.raises(Exception, match="no captions"):
        prepare_inputs(task, suite.base_dir, "captions", InputSettings())


def test_captions_are_generated_once_and_cached_by_video_hash(tmp_path):
    from ego2web_replay.judge.captioner import LLMCaptioner
    from ego2web_replay.judge.client import LLMConfig

    video = make_video(tmp_path / "v.mp4", seconds=8, colours=[GREY] * 6 + [MAGENTA] * 2)
    with FakeOpenAIServer(lambda body: json.dumps(CAPTION)) as srv:
        client = LLMCaptioner(LLMConfig(model="captioner", base_url=srv.base_url))
        made, calls = generate_captions(video, client, frames_per_clip=2)
        assert calls == 2 and len(srv.requests) == 2  # two 5-second clips: 0-5 and 5-8
        images = [p for p in srv.requests[0]["messages"][0]["content"] if p["type"] == "image_url"]
        assert len(images) == 2
        again, calls = generate_captions(video, LLMCaptioner(LLMConfig(model="captioner", base_url=srv.base_url)),
                                         frames_per_clip=2)
        assert calls == 0 and len(srv.requests) == 2 and again == made
    assert [(c.start, c.end) for c in made.captions] == [(0.0, 5.0), (5.0, 8.0)]
    assert made.captions[0].line() == ("[00:00-00:05] a person holds a magenta mug; objects: mug; actions: holding; "
                                       "brands: Acme; colours: magenta")
    stored = json.loads(captions_path(video).read_text())
    assert stored["clip_seconds"] == 5.0 and len(stored["video_sha256"]) == 64


@pytest.mark.slow
def test_each_modality_sends_what_it_names_and_never_the_evidence(tmp_path, ca):
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.runner.run import RunSettings, run_suite

    answer = '{"thought": "done", "action": {"kind": "answer", "answer": "$12.99"}}'
    with DemoSite() as site, FakeOpenAIServer(lambda body: answer if "Task:" in json.dumps(body)
                                              else json.dumps(CAPTION)) as srv:
        suite_path = _suite(tmp_path / "suite", f"{site.url}/shop")
        suite = load_tasks(suite_path)
        from ego2web_replay.judge.captioner import LLMCaptioner
        from ego2web_replay.judge.client import LLMConfig

        generate_captions(tmp_path / "suite" / "clip.mp4", LLMCaptioner(LLMConfig(model="c", base_url=srv.base_url)))
        sent: dict[str, dict] = {}
        for modality, extra in (("keyframes", {}), ("video", {"video_fps": 1.0}),
                                ("video_url", {"video_transport": "video_url"}), ("captions", {}), ("none", {})):
            before = len(srv.requests)
            inputs = InputSettings(modality="video" if modality == "video_url" else modality, **extra)
            settings = RunSettings(mode="live", guard="loopback", timeout_s=60, max_steps=4, inputs=inputs)
            run_dir, results = run_suite(suite, agent_name="openai", out=tmp_path / "runs", settings=settings,
                                         agent_settings={"model": "m", "base_url": srv.base_url},
                                         run_id=modality)
            assert results[0].ok, results[0].error
            assert len(srv.requests) == before + 1  # step 0 opens the start URL without a model call
            sent[modality] = srv.requests[-1]
            traj = load_trajectory(episode_dir(run_dir, "firewall", "live"))
            assert traj.agent.input_modality == inputs.modality
            assert traj.steps[0].action.url == f"{site.url}/shop" and traj.steps[0].url == f"{site.url}/shop"
            assert traj.extra["inputs"]["modality"] == inputs.modality
    for modality, body in sent.items():
        text = json.dumps(body)
        assert not any(s in text for s in SECRETS), modality
        assert f"Start URL: {site.url}/shop" in text and "Allowed sites: 127.0.0.1" in text
        parts = body["messages"][1]["content"]
        stamps = [float(p["text"][2:-1]) for p in parts if p["type"] == "text" and p["text"].startswith("t=")]
        images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        frames = images[:len(stamps)]
        if modality == "keyframes":
            assert stamps == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5]
        elif modality == "video":
            assert len(stamps) == 8 and min(stamps) < 1 and max(stamps) > 7
        else:
            assert stamps == []
        if frames:  # mostly grey: the magenta evidence range is only its share of the whole video
            colours = [_colour(u) for u in frames]
            assert sum(_near(c, GREY) for c in colours) == 6 and sum(_near(c, MAGENTA) for c in colours) == 2
        videos = [p for p in parts if p["type"] == "video_url"]
        assert len(videos) == (1 if modality == "video_url" else 0)
        if videos:
            raw = (tmp_path / "suite" / "clip.mp4").read_bytes()
            assert base64.b64decode(videos[0]["video_url"]["url"].split(",", 1)[1]) == raw
        has_captions = "Video captions (one per clip):" in text and "[00:05-00:08] a person holds" in text
        assert has_captions == (modality == "captions")
        assert len(images) == len(frames) + 1  # plus the start page's screenshot


def test_captions_command(tmp_path, capsys, monkeypatch):
    from ego2web_replay.cli import main

    for var in ("OPENAI_BASE_URL", "EGO2WEB_CAPTION_MODEL"):
        monkeypatch.delenv(var, raising=False)
    suite = _suite(tmp_path, "http://127.0.0.1:9/")
    assert main(["captions", str(suite)]) == 1
    assert capsys.readouterr().err.startswith("error: captions need a multimodal model")
    with FakeOpenAIServer(lambda body: json.dumps(CAPTION)) as srv:
        args = ["captions", str(suite), "--model", "cap", "--base-url", srv.base_url, "--frames-per-clip", "1"]
        assert main(args) == 0
        assert "firewall: 2 clip caption(s)" in capsys.readouterr().out and len(srv.requests) == 2
        assert main(args) == 0
        assert "(cached)" in capsys.readouterr().out and len(srv.requests) == 2
    task = load_tasks(suite).tasks[0]
    got = prepare_inputs(task, tmp_path, "captions", InputSettings())
    assert got.captions[1].startswith("[00:05-00:08] a person holds a magenta mug")
