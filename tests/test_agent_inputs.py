"""The evidence firewall and the four input modalities: what an agent is actually sent.

The task's 8-second video is grey except its last two seconds, which are
magenta and hold its annotated evidence range (00:06.25-00:07.75). A local
OpenAI-compatible server records every request the openai agent makes; the
frames in them must come from the whole video, and nothing the judge alone
should read may appear in them. A ``command:`` agent that walks every path it is
handed must reach nothing of the suite, the run or the judge's cache.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import tempfile
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
SECRETS = ("SECRET-ANSWER", "SECRET-KEYPOINT", "SECRET-CUE", "00:06", "6.25", "7.75", "SECRET-PATTERN",
           "SECRET-URL", "SECRET-RUBRIC", "SECRET-NOTE", "SECRET-WHY")
CAPTION = {"summary": "a person holds a magenta mug", "objects": ["mug"], "actions": ["holding"],
           "text_seen": [], "brands": ["Acme"], "colours": ["magenta"]}


def _suite(folder: Path, start_url: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    make_video(folder / "clip.mp4", seconds=8, colours=[GREY] * 6 + [MAGENTA] * 2)
    task = {"id": "firewall", "instruction": "Find the price of the object I am holding.", "start_url": start_url,
            "allowed_domains": ["127.0.0.1"], "video": "clip.mp4", "evidence": ["00:06.25-00:07.75"],
            "expected_answer": "SECRET-ANSWER", "key_points": ["SECRET-KEYPOINT"], "must_match": ["SECRET-CUE"],
            "answer_patterns": ["SECRET-PATTERN"], "url_patterns": ["SECRET-URL"],
            "rubric": {"text": "SECRET-RUBRIC", "children": []}, "annotator_note": "SECRET-NOTE",
            "why_video_dependent": "SECRET-WHY: only the keyframe at 6 s shows the mug"}
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


def test_the_agent_folder_holds_private_copies_and_is_removed(tmp_path, ca):
    import stat

    from ego2web_replay.errors import Ego2WebError
    from ego2web_replay.models import Action, PageCapture, Step, Trajectory, read_model, save_model
    from ego2web_replay.redaction import Redactor
    from ego2web_replay.runner.agent_folder import AgentFolder
    from ego2web_replay.runner.inputs import AgentInputs

    suite = load_tasks(_suite(tmp_path / "suite", "http://127.0.0.1:9/"))
    sent = prepare_inputs(suite.tasks[0], suite.base_dir, "video", InputSettings(video_fps=0.5))
    episode = tmp_path / "episode"
    episode.mkdir()
    with AgentFolder(suite.tasks[0], sent, ca.cert_path, episode=episode, program=True) as folder:
        root = folder.root
        assert stat.S_IMODE(root.stat().st_mode) == 0o700 and not root.is_relative_to(tmp_path)
        originals = [p for _, p in sent.frames] + [sent.video]
        copies = [p for _, p in folder.inputs.frames] + [folder.inputs.video]
        for original, copy in zip(originals, copies, strict=True):  # copies: neither links nor the same file
            assert copy.is_relative_to(root) and not copy.is_symlink()
            assert copy.stat().st_ino != original.stat().st_ino and copy.read_bytes() == original.read_bytes()
        assert json.loads(folder.task_file.read_text())["video"] == str(folder.inputs.video)
        assert folder.ca_file.read_bytes() == ca.cert_path.read_bytes()
        (folder.out_dir / "shots").mkdir()
        (folder.out_dir / "shots" / "a.png").write_bytes(b"png")
        (folder.out_dir / "answer.txt").write_text("x")
        (folder.out_dir / "pages").mkdir()  # a page capture the program wrote: its DOM is named from its folder
        (folder.out_dir / "pages" / "step-001.html").write_text("<p>dom</p>")
        save_model(folder.out_dir / "pages" / "step-001.json", PageCapture(
            step=1, url="http://127.0.0.1:9/item?api_key=s3cret", text="dom", dom="pages/step-001.html"))
        os.chmod(root / "frames", 0o500)  # the program took away its own write permission (root ignores it)
        traj = Trajectory(task_id="firewall", instruction="i", mode="frozen", agent={"name": "command"}, steps=[
            Step(index=0, action=Action(kind="stop"), screenshot=str(folder.out_dir / "shots" / "a.png")),
            Step(index=1, action=Action(kind="stop"), screenshot="shots/a.png", page="pages/step-001.json"),
            Step(index=2, action=Action(kind="stop"), screenshot="/elsewhere/b.png")])
        folder.collect(traj, redact_url=Redactor.make().url)
    assert not root.exists()
    assert [s.screenshot for s in traj.steps] == ["agent/shots/a.png", "agent/shots/a.png", None]  # refused
    assert "screenshot '/elsewhere/b.png' refused" in traj.steps[2].error
    assert (episode / "agent" / "answer.txt").read_text() == "x"
    assert traj.steps[1].page == "agent/pages/step-001.json"
    capture = read_model(episode / traj.steps[1].page, PageCapture, "page capture")
    assert capture.dom == "agent/pages/step-001.html" and (episode / capture.dom).read_text() == "<p>dom</p>"
    assert "s3cret" not in capture.url and capture.url.startswith("http://127.0.0.1:9/item?api_key=")
    assert json.loads((episode / "inputs.json").read_text())["frames"][0]["path"].startswith(str(root))
    gone = AgentInputs("keyframes", frames=[(1.0, tmp_path / "missing.png")])
    with pytest.raises(Ego2WebError, match="cannot copy the agent's inputs into its private folder") as e:
        AgentFolder(suite.tasks[0], gone, ca.cert_path, episode=episode).__enter__()
    left = Path(str(e.value).split("private folder ", 1)[1].split(" ", 1)[0])
    assert left.name.startswith("ego2web-agent-") and not left.exists()  # nothing left behind


def test_folders_of_runner_processes_now_gone_are_swept(tmp_path):
    import subprocess

    from ego2web_replay.runner.agent_folder import PREFIX, sweep

    done = subprocess.Popen(["true"])
    done.wait()  # a process that is gone: a worker killed mid-episode leaves such a folder
    dead, mine = tmp_path / f"{PREFIX}{done.pid}-abc", tmp_path / f"{PREFIX}{os.getpid()}-abc"
    theirs, link = tmp_path / f"{PREFIX}{done.pid}-other", tmp_path / f"{PREFIX}{done.pid}-link"
    root = os.getuid() == 0
    for folder in (dead, mine, theirs) if root else (dead, mine):
        (folder / "frames").mkdir(parents=True)
    (dead / "frames" / "000.png").write_bytes(b"png")
    link.symlink_to(mine)
    if root:
        os.chown(theirs, 65534, 65534)  # another user's folder is never touched
    assert sweep(tmp_path) == [dead] and not dead.exists()
    assert mine.is_dir() and link.is_symlink() and (theirs.is_dir() or not root)


@pytest.mark.slow
def test_each_modality_sends_what_it_names_and_never_the_evidence(tmp_path, ca, monkeypatch):
    from ego2web_replay.agents.openai_agent import OpenAIAgent
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.runner.agent_folder import PREFIX
    from ego2web_replay.runner.run import RunSettings, run_suite

    observed: list[Path] = []  # every path the openai agent is handed in its observations
    act = OpenAIAgent.act

    def spy(self, obs):
        observed.extend([p for _, p in obs.keyframes] + [p for p in (obs.video, obs.task.video) if p])
        return act(self, obs)

    monkeypatch.setattr(OpenAIAgent, "act", spy)
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
    assert observed and all(Path(p).parent.name.startswith(PREFIX) or Path(p).parent.parent.name.startswith(PREFIX)
                            for p in observed), observed  # its private copies: frames/NNN.png, the video
    assert not any(Path(p).is_relative_to(tmp_path) or Path(p).exists() for p in observed)  # removed after
    for modality, body in sent.items():
        text = json.dumps(body)
        assert not any(s in text for s in SECRETS), modality
        assert str(tmp_path) not in text and "clip.mp4" not in text, modality  # no path, not even the name
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


# -- what a program can reach: the private folder ------------------------------------------------------------------
# A command: agent that walks every path it is handed (and every folder above them), reads every file it
# finds and reports it all. The machine's shared folders above the private one (/, the system temporary
# folder and the folders above it, sticky ones such as /tmp) are listed, not searched: every program can
# list them, and what matters is that nothing there is the suite, the run or the judge's cache.
WALKER = r'''
import hashlib, json, os, stat, tempfile, urllib.request

env = os.environ
inputs = json.load(open(env["EGO2WEB_INPUTS"]))
task = json.load(open(env["EGO2WEB_TASK_FILE"]))
given = [env[k] for k in ("EGO2WEB_TASK_FILE", "EGO2WEB_INPUTS", "EGO2WEB_OUT", "EGO2WEB_CA_FILE", "EGO2WEB_VIDEO")
         if env.get(k)]
given += [f["path"] for f in inputs["frames"]] + [p for p in (inputs["video"], task.get("video")) if p]
given = [os.path.abspath(p) for p in given]
tmp = os.path.realpath(tempfile.gettempdir())
report = {"given": given, "env": {k: v for k, v in env.items() if k.startswith("EGO2WEB_")}, "listed": {},
          "searched": [], "files": {}, "texts": {}, "links": [], "modes": {}}


def shared(d):
    real = os.path.realpath(d)
    return real == "/" or os.path.commonpath([real, tmp]) == real or bool(os.stat(real).st_mode & stat.S_ISVTX)


def read(path):
    if os.path.islink(path):
        report["links"].append([path, os.readlink(path)])
    if path in report["files"] or not os.path.isfile(path):
        return
    data = open(path, "rb").read()
    report["files"][path] = hashlib.sha256(data).hexdigest()
    if not path.endswith((".png", ".mp4")):
        report["texts"][path] = data.decode("utf-8", "replace")


def search(top):
    if top in report["searched"]:
        return
    report["searched"].append(top)
    report["modes"][top] = stat.S_IMODE(os.stat(top).st_mode)
    for root, dirs, names in os.walk(top):  # links are reported, and not followed
        for name in dirs + names:
            read(os.path.join(root, name))


for p in given:
    read(p)
    if os.path.isdir(p):
        search(p)
    d = os.path.dirname(p)
    while True:
        if shared(d):
            report["listed"][d] = sorted(os.listdir(d))
        else:
            search(d)
        if d == "/":
            break
        d = os.path.dirname(d)
with urllib.request.urlopen(task["start_url"], timeout=30) as r:  # through the proxy: a real episode
    report["page"] = r.read().decode("utf-8", "replace")
out = env["EGO2WEB_OUT"]
json.dump(report, open(os.path.join(out, "report.json"), "w"))
open(os.path.join(out, "answer.txt"), "w").write("walked")
'''


@pytest.fixture(scope="module")
def firewall(tmp_path_factory, ca):
    """The demo site, a suite with captions and the judge's keyframes beside its video, a snapshot of the start
    page, and an earlier run's judge cache in the runs folder: everything a walker must not reach."""
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.judge.cache import CallCache
    from ego2web_replay.judge.captioner import LLMCaptioner
    from ego2web_replay.judge.client import LLMConfig
    from ego2web_replay.media.keyframes import extract_keyframes, keyframe_dir
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    root = tmp_path_factory.mktemp("firewall")
    site = DemoSite().start()
    suite = load_tasks(_suite(root / "suite", f"{site.url}/shop"))
    task = suite.tasks[0]
    video = root / "suite" / "clip.mp4"
    with FakeOpenAIServer(lambda body: json.dumps(CAPTION)) as srv:
        generate_captions(video, LLMCaptioner(LLMConfig(model="c", base_url=srv.base_url)))
    extract_keyframes(video, task.evidence)  # what the judge leaves beside the video: an index of the ranges
    assert "6.25" in (keyframe_dir(video) / "index.json").read_text()
    cache = root / "runs" / "earlier" / "judge-cache"
    CallCache(cache).put("k1", {"messages": [{"role": "user", "content": "key points: SECRET-KEYPOINT"}]},
                         "SECRET-ANSWER 00:06.25-00:07.75", 1, 1)
    sw = SnapshotWriter(root / "snapshots", task.id, snapshot_id="s1")
    sw.writer.write_exchange(url=f"{site.url}/shop", method="GET", request_headers=[], request_body=b"", status=200,
                             reason="OK", response_headers=[("Content-Type", "text/html")],
                             response_body=b"<title>frozen shop</title>")
    sw.finalize()
    program = root / "walker.py"
    program.write_text(WALKER, "utf-8")
    yield {"root": root, "suite": suite, "video": video, "cache": cache, "program": program, "site": site}
    site.stop()


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("modality, extra", [
    ("video", {"video_fps": 1.0}), ("video", {"video_transport": "video_url"}), ("keyframes", {}),
    ("captions", {}), ("none", {}),
], ids=["video-frames", "video-url", "keyframes", "captions", "none"])
def test_a_program_reaches_nothing_of_the_evidence_from_what_it_is_handed(firewall, modality, extra):
    from ego2web_replay.runner.agent_folder import PREFIX
    from ego2web_replay.runner.run import RunSettings, run_suite

    root, suite = firewall["root"], firewall["suite"]
    inputs = InputSettings(modality=modality, **extra)
    settings = RunSettings(mode="both", guard="loopback", timeout_s=60, snapshots_root=str(root / "snapshots"),
                           inputs=inputs)
    run_id = f"{modality}-{extra.get('video_transport', 'frames')}"
    run_dir, results = run_suite(suite, agent_name=f"command:{sys.executable} {firewall['program']}",
                                 out=root / "runs", settings=settings, run_id=run_id)
    sent = prepare_inputs(suite.tasks[0], suite.base_dir, modality, inputs)  # the runner's own (cached) inputs
    forbidden = {p.resolve() for p in (root, root / "suite", suite.path, root / "runs", run_dir, firewall["cache"],
                                       firewall["video"].parent / "clip.mp4.keyframes")}
    for summary in results:
        assert summary.ok and summary.answer == "walked", (summary.mode, summary.error)
        report = json.loads((summary.path / "agent" / "report.json").read_text())
        assert ("frozen shop" in report["page"]) == (summary.mode == "frozen")
        given = [Path(p) for p in report["given"]]
        private = Path(os.path.commonpath(given))
        assert private.name.startswith(PREFIX) and private.parent == Path(tempfile.gettempdir())
        assert report["modes"][str(private)] == 0o700 and not private.exists()  # private, and removed after
        assert report["searched"] == [str(p) for p in report["searched"] if Path(p).is_relative_to(private)]
        assert str(private) in report["searched"] and report["links"] == []
        for folder, names in report["listed"].items():
            assert not any((Path(folder) / n).resolve() in forbidden for n in names), folder
        files = sorted(str(Path(f).relative_to(private)) for f in report["files"])
        frames = [f"frames/{i:03d}.png" for i in range(len(sent.frames))]
        expect = ["ca.pem", "inputs.json", "task.json", *frames] + (["clip.mp4"] if sent.video else [])
        assert files == sorted(expect)
        hashes = {str(Path(f).relative_to(private)): h for f, h in report["files"].items()}
        assert [hashes[f] for f in frames] == [_sha(p) for _, p in sent.frames]  # the whole video's frames
        if sent.video:
            assert hashes["clip.mp4"] == _sha(firewall["video"]) and report["env"]["EGO2WEB_VIDEO"].startswith(
                str(private))
        else:
            assert "EGO2WEB_VIDEO" not in report["env"]
        text = "\n".join(report["texts"].values())
        for secret in (*SECRETS, str(root), str(root.resolve()), "judge-cache", "tasks.json", ".keyframes"):
            assert secret not in text, (summary.mode, secret)
        handed = json.loads((summary.path / "inputs.json").read_text())  # the record of what was handed out
        assert handed["modality"] == modality and len(handed["frames"]) == len(sent.frames)
        assert len(handed["captions"]) == (2 if modality == "captions" else 0)
        assert json.loads((summary.path / "task.json").read_text())["instruction"] == suite.tasks[0].instruction
