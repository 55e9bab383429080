"""`runs export --format mind2web2-cache`: real episodes (real Chromium, the demo site on 127.0.0.1, the real
runner, live and frozen, two repeats) exported as Mind2Web 2's evaluation cache.

The cache is read back here the way Mind2Web 2's ``CacheFileSys`` reads it (its
layout, written down from its code: ``index.json`` maps a URL key to ``"web"``;
``<md5 of the key>.txt`` and ``.jpg`` must both exist or the entry is dropped),
by code of this test, not the exporter's. Their class itself reads the export in
``scripts/check_mind2web2_cache.py`` (it needs their source checkout; see the
last test).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urldefrag

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import PageCapture, episode_dir, load_trajectory, read_model

pytestmark = pytest.mark.slow

MUG = "shop-mug-price"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory, ca):
    """MUG recorded, then run live and frozen twice each by the scripted agent, whose answer cites the mug page."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks

    root = tmp_path_factory.mktemp("m2w")
    site = DemoSite().start()
    try:
        suite_path = write_demo_suite(root / "suite", site.url, [MUG])
        task = json.loads(suite_path.read_text("utf-8").splitlines()[0])
        mug = f"{site.url}/shop/item/7"
        task["reference_actions"][-1] = {"kind": "answer", "answer": f"The Red Ceramic Mug costs $12.99 ({mug}/#price)."}
        suite_path.write_text(json.dumps(task) + "\n", "utf-8")
        suite = load_tasks(suite_path)
        rec = record_task(suite.get(MUG), root / "snapshots", RecordOptions(guard="loopback"), ca=ca)
        assert rec.ok, rec.error
        settings = RunSettings(mode="both", snapshots_root=str(root / "snapshots"), guard="loopback", timeout_s=60,
                               action_timeout_s=10, repeats=2)
        run_dir, results = run_suite(suite, agent_name="scripted", out=root / "runs", settings=settings)
        assert [r.end_reason for r in results] == ["answered"] * 4, [r.error for r in results]
        yield {"run": run_dir, "root": root, "mug": mug, "shop": f"{site.url}/shop"}
    finally:
        site.stop()


def _key(url: str) -> str:
    """Mind2Web 2's stored form of a URL: no fragment, percent-decoded, no trailing slash."""
    bare = unquote(urldefrag(url)[0])
    return bare[:-1] if bare.endswith("/") and len(bare) > 1 and not bare.endswith("://") else bare


def _read_cache(folder: Path) -> dict[str, tuple[str, bytes]]:
    """The cache as Mind2Web 2's loader keeps it: entries whose text and screenshot files both exist."""
    index = json.loads((folder / "index.json").read_text("utf-8"))
    kept = {}
    for url, kind in index.items():
        stem = hashlib.md5(_key(url).encode("utf-8")).hexdigest()
        txt, jpg = folder / f"{stem}.txt", folder / f"{stem}.jpg"
        if kind == "web" and txt.is_file() and jpg.is_file():
            kept[url] = (txt.read_text("utf-8"), jpg.read_bytes())
    return kept


def _decode(image: bytes | Path):
    import io

    import av

    with av.open(io.BytesIO(image) if isinstance(image, bytes) else str(image)) as c:
        return next(c.decode(video=0)).to_ndarray(format="rgb24").astype(int)


@pytest.fixture(scope="module")
def exported(run):
    out = run["root"] / "m2w"
    assert main(["runs", "export", str(run["run"]), "--format", "mind2web2-cache", "--mode", "frozen",
                 "--out", str(out), "--json", str(run["root"] / "export.json")]) == 0
    return out, json.loads((run["root"] / "export.json").read_text("utf-8"))


def test_each_page_the_agent_rendered_is_cached_with_its_text_and_the_screenshot_it_saw(run, exported):
    out, summary = exported
    assert (summary["format"], summary["mode"], summary["agent_name"]) == ("mind2web2-cache", "frozen", "scripted")
    assert summary["counts"] == {"tasks": 1, "pages": 2, "answers": 2, "left_out": 0, "skipped_episodes": 0,
                                 "replaced_renders": 0}
    cache = _read_cache(out / "cache" / "scripted" / MUG)
    assert set(cache) == {_key(run["shop"]), _key(run["mug"])}
    last = episode_dir(run["run"], MUG, "frozen", 1)  # the last repeat's render is the one kept
    traj = load_trajectory(last)
    assert [s.action.kind for s in traj.steps] == ["goto", "click", "wait", "answer"]
    answer_step = traj.steps[-1]
    capture = read_model(last / answer_step.page, PageCapture, "page capture")
    text, jpg = cache[_key(run["mug"])]
    assert text == capture.text and "Price: $12.99" in text  # the price the page's script wrote, as rendered
    # the answer step takes no screenshot: the one the agent looked at is the wait step's, of the same page
    png = _decode(last / traj.steps[2].screenshot)
    got = _decode(jpg)
    assert got.shape == png.shape and abs(got - png).mean() < 3.0
    assert jpg[:2] == b"\xff\xd8" and jpg[-2:] == b"\xff\xd9"
    provenance = json.loads((out / "ego2web-export.json").read_text("utf-8"))["tasks"][0]
    mug = next(p for p in provenance["cached"] if p["key"] == _key(run["mug"]))
    assert (mug["repeat"], mug["text_step"], mug["screenshot_step"]) == (1, 3, 2)
    assert mug["episode"] == "episodes/shop-mug-price/frozen-r1"
    shop_text, _ = cache[_key(run["shop"])]
    assert "Red Ceramic Mug" in shop_text


def test_answers_and_url_metadata_are_written_where_mind2web2_reads_them(run, exported):
    out, _ = exported
    for repeat in (0, 1):
        answer = (out / "answers" / "scripted" / MUG / f"answer_{repeat + 1}.md").read_text("utf-8")
        assert answer == load_trajectory(episode_dir(run["run"], MUG, "frozen", repeat)).answer
    meta = json.loads((out / "cache" / "scripted" / f"{MUG}.json").read_text("utf-8"))
    assert meta["task_id"] == MUG and meta["cached_url_count"] == 2
    assert meta["url_types"] == {_key(run["shop"]): "web", _key(run["mug"]): "web"}
    # the URL the answer cites (trailing slash, fragment) is stored under the key their lookup tries first
    cited = f"{run['mug']}/#price"
    assert _key(cited) in json.loads((out / "cache" / "scripted" / MUG / "index.json").read_text("utf-8"))


def test_live_episodes_export_on_their_own_and_the_agent_folder_can_be_renamed(run, capsys):
    out = run["root"] / "m2w-live"
    assert main(["runs", "export", str(run["run"]), "--mode", "live", "--out", str(out), "--agent-name",
                 "my agent/v2"]) == 0
    printed = capsys.readouterr().out
    assert "exported 1 task(s) of live episodes as agent 'my-agent-v2': 2 page(s), 2 answer(s)" in printed
    cache = _read_cache(out / "cache" / "my-agent-v2" / MUG)
    capture = read_model(episode_dir(run["run"], MUG, "live", 1) / "pages/step-003.json", PageCapture, "capture")
    assert cache[_key(run["mug"])][0] == capture.text


def test_bad_requests_fail_in_one_line_and_leave_what_exists(run, capsys):
    out = run["root"] / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine", "utf-8")
    assert main(["runs", "export", str(run["run"]), "--mode", "frozen", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "exists and is not empty" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert main(["runs", "export", str(run["run"]), "--format", "webarena", "--out", str(out / "x")]) == 1
    err = capsys.readouterr().err
    assert "unknown export format 'webarena'; known formats: mind2web2-cache" in err
    assert len(err.strip().splitlines()) == 1 and not (out / "x").exists()
    assert main(["runs", "export", str(run["run"]), "--out", str(run["root"] / "both")]) == 1
    err = capsys.readouterr().err
    assert "has frozen and live episodes; choose one with --mode" in err
    assert not (run["root"] / "both").exists()
    assert not list(run["root"].glob(".*partial*"))


def test_mind2web2s_own_cache_class_reads_the_export(run, exported, tmp_path):
    """Their CacheFileSys, from a checkout of github.com/OSU-NLP-Group/Mind2Web-2 named by MIND2WEB2_SRC
    (their package is not on PyPI), reads every exported page back byte for byte."""
    src = os.environ.get("MIND2WEB2_SRC")
    if not src or not (Path(src) / "mind2web2/utils/cache_filesys.py").is_file():
        pytest.skip("MIND2WEB2_SRC does not name a Mind2Web 2 checkout (not on PyPI; see "
                    "scripts/check_mind2web2_cache.py)")
    python = os.environ.get("MIND2WEB2_PYTHON", sys.executable)
    proc = subprocess.run([python, str(ROOT / "scripts/check_mind2web2_cache.py"), src, str(exported[0]),
                           "--json", str(tmp_path / "check.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "check.json").read_text("utf-8"))
    assert report["pages"] == 2 and report["mismatches"] == []
    lookups = {r["lookup"]: r for r in report["checked"]}
    assert set(lookups) >= {run["mug"], f"{run['mug']}/", f"{run['mug']}/#top", run["shop"]}
    assert all(r["found"] and r["text_equal"] and r["pixel_diff"] < 3.0 for r in lookups.values())
    assert lookups[f"{run['mug']}/#top"]["stored"] == run["mug"]


def _their_python_has_the_evaluator() -> str | None:
    python = os.environ.get("MIND2WEB2_PYTHON")
    src = os.environ.get("MIND2WEB2_SRC")
    if not python or not src:
        return None
    probe = subprocess.run([python, "-c", "import mind2web2.eval_runner"], capture_output=True, timeout=120)
    return python if probe.returncode == 0 else None


def test_mind2web2s_evaluator_scores_the_exported_answers_from_the_cache_offline(run, exported, tmp_path):
    """Their evaluate_task, their Evaluator and OpenAI client, against a local OpenAI-compatible server: the
    cited page comes from the export (no live capture), and only the answer whose price the rendered page
    shows is scored as supported."""
    import re

    from ego2web_replay.testing.openai_server import FakeOpenAIServer

    python = _their_python_has_the_evaluator()
    if python is None:
        pytest.skip("MIND2WEB2_PYTHON has no installed mind2web2 package (pip install a checkout of "
                    "github.com/OSU-NLP-Group/Mind2Web-2 into a venv of its own)")
    seen: list[dict] = []

    def reply(body):
        parts = body["messages"][-1]["content"]
        text = parts if isinstance(parts, str) else "".join(p.get("text", "") for p in parts)
        images = 0 if isinstance(parts, str) else sum(p.get("type") == "image_url" for p in parts)
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        seen.append({"schema": schema, "images": images})
        if schema == "CitedUrl":
            found = re.search(r"https?://\d+\.\d+\.\d+\.\d+:\d+[^\s)`]*", text)
            return json.dumps({"url": found.group(0).rstrip(".") if found else None})
        claimed = re.search(r"costs (\$[\d.]+)", text).group(1)
        ok = f"Price: {claimed}" in text and images > 0
        return json.dumps({"reasoning": f"the page {'shows' if ok else 'does not show'} {claimed}", "result": ok})

    with FakeOpenAIServer(reply) as srv:
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "local"}
        proc = subprocess.run([python, str(ROOT / "scripts/check_mind2web2_cache.py"), os.environ["MIND2WEB2_SRC"],
                               str(exported[0]), "--evaluate", "the answer's price is on the page", "--control",
                               "The Red Ceramic Mug costs $9.99.", "--json", str(tmp_path / "eval.json")],
                              capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evaluation = json.loads((tmp_path / "eval.json").read_text("utf-8"))["evaluation"]
    assert evaluation[MUG] == {"answer_1.md": 1.0, "answer_2.md": 1.0, "answer_control.md": 0.0}
    assert evaluation[f"{MUG}:live_captures"] == 0
    verifications = [s for s in seen if s["schema"] == "BinaryEvalResult"]
    assert verifications and all(s["images"] >= 1 for s in verifications)  # the cached screenshot was sent
