"""The CLI's output conventions (``commands/_output.py``, ``commands/_options.py``): cheap to import,
results on stdout and progress on stderr, nothing folded when piped, one ``--json`` convention."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import ego2web_replay
import ego2web_replay.judge
from ego2web_replay.cli import cli
from ego2web_replay.commands.judge import JUDGE_NAMES
from ego2web_replay.commands.record import record_cmd

EXE = Path(sys.executable).with_name("ego2web-replay")
HEAVY = ("openai", "duckdb", "mitmproxy", "playwright", "av", "numpy", "pydantic", "rich", "warcio", "zstandard")
LONG_DIR = "/".join(["d" * 60] * 5)


def _walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _walk(sub, path + (name,))


def _imported_after(code: str) -> list[str]:
    """The heavy packages a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_importing_the_cli_imports_no_heavy_package():
    assert _imported_after("import ego2web_replay.cli") == []


def test_help_and_argument_errors_import_no_heavy_package():
    code = """
import click
from ego2web_replay.cli import cli, main
def walk(c, path=()):
    yield path
    if isinstance(c, click.Group):
        for name, sub in c.commands.items():
            yield from walk(sub, path + (name,))
for path in walk(cli):
    assert main([*path, "--help"]) == 0, path
for bad in (["run", "--nope"], ["snapshot", "show"], ["record", "t.json", "--compression", "xz"], ["judge"]):
    assert main(bad) != 0, bad
"""
    assert _imported_after(code) == []


def test_every_command_takes_the_output_options():
    for path, command in _walk(cli):
        names = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert {"-q", "--quiet", "-v", "--verbose", "--no-progress"} <= names, path


def test_one_concept_one_option_record_and_run_share_keep_credentials():
    def keep(name: str) -> list[tuple[str, str]]:
        return [(p.name or "", p.help or "") for p in cli.commands[name].params
                if "--keep-credentials" in getattr(p, "opts", [])]

    assert keep("record") == keep("run") and len(keep("run")) == 1
    assert keep("run")[0][0] == "keep_credentials" and "redact" in keep("run")[0][1]


def test_judge_help_names_every_registered_judge():
    from ego2web_replay.judge.registry import JUDGES

    assert set(JUDGE_NAMES) == set(JUDGES)


def test_lazy_package_names_resolve():
    for package in (ego2web_replay, ego2web_replay.judge):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
        with pytest.raises(AttributeError):
            package.no_such_name  # noqa: B018


def test_compression_is_one_option_with_a_hidden_deprecated_alias():
    def params(*args: str) -> dict:
        return record_cmd.make_context("record", ["tasks.json", *args]).params

    assert params()["compression"] == "zst"
    assert params("--compression", "gz")["compression"] == "gz"
    assert params("--format", "gz")["compression"] == "gz"
    help_text = CliRunner().invoke(cli, ["record", "--help"]).output
    assert "--compression" in help_text and "--format" not in help_text


@pytest.fixture(scope="module")
def long_run(tmp_path_factory, data_home):
    """A real run (frozen, no snapshot: one setup error) under a very long path, run piped."""
    root = tmp_path_factory.mktemp("cli-output") / LONG_DIR
    root.mkdir(parents=True)
    tasks = root / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "instruction": "x", "start_url": "http://127.0.0.1:9/"}) + "\n")
    run_id = "r-" + "x" * 150
    args = ["run", str(tasks), "--agent", "command:true", "--mode", "frozen", "--snapshots", str(root / "snaps"),
            "--out", str(root / "runs"), "--no-db"]
    return root, run_id, args, _piped(*args, "--run-id", run_id, data_home=data_home)


def _piped(*args: str, data_home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}, **(env or {})}
    env["EGO2WEB_REPLAY_HOME"] = str(data_home)
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=env, timeout=120)


def test_piped_lines_stay_whole_whatever_the_path_length(long_run, data_home):
    root, run_id, _, r = long_run
    assert r.returncode == 1  # every episode failed to set up
    assert r.stdout == f"run folder: {root / 'runs' / run_id}\n"  # the result on stdout
    episode = [line for line in r.stderr.splitlines() if line.startswith("setup_error")]
    assert len(episode) == 1, r.stderr  # progress on stderr, one unbroken line
    assert f"no snapshot of task 't1' under {root / 'snaps'}; record one with" in episode[0]
    assert "━" not in r.stderr  # no progress bar in a log

    listed = _piped("runs", "list", "--out", str(root / "runs"), data_home=data_home)
    assert listed.returncode == 0 and run_id in listed.stdout  # the id is never cut
    shown = _piped("runs", "show", str(root / "runs" / run_id), data_home=data_home)
    header = shown.stdout.splitlines()[0]
    assert header.startswith(f"run {run_id}  agent=command:true") and header.endswith(f"suite={root / 'tasks.jsonl'}")


def test_quiet_and_no_progress(long_run, data_home):
    *_, args, _ = long_run
    quiet = _piped("-q", *args, "--run-id", "quiet", data_home=data_home)
    assert quiet.returncode == 1 and quiet.stdout.startswith("run folder: ")
    assert quiet.stderr.startswith("error: every episode errored (1: setup_error)") and quiet.stderr.count("\n") == 1
    # rich draws the bar when told stderr is an interactive terminal; --no-progress keeps only the lines
    tty = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
    drawn = _piped(*args, "--run-id", "drawn", data_home=data_home, env=tty)
    assert "━" in drawn.stderr and "setup_error" in drawn.stderr
    plain = _piped(*args, "--run-id", "plain", "--no-progress", data_home=data_home, env=tty)
    assert "━" not in plain.stderr and "setup_error" in plain.stderr


def test_json_option_means_the_same_everywhere(long_run, data_home, tmp_path):
    root, run_id, *_ = long_run
    run_dir = root / "runs" / run_id
    for form in (["--json"], ["--json", "-"]):
        r = _piped("runs", "show", str(run_dir), *form, data_home=data_home)
        assert r.returncode == 0 and json.loads(r.stdout)["run"]["run_id"] == run_id  # only JSON on stdout
    listed = json.loads(_piped("runs", "list", "--out", str(root / "runs"), "--json", data_home=data_home).stdout)
    ours = [r for r in listed if r["run"] == run_id]
    assert ours and ours[0]["episodes"] == {"setup_error": 1} and ours[0]["path"] == str(run_dir)
    assert ours[0]["manifest"]["agent_name"] == "command:true"
    out = tmp_path / "show.json"
    r = _piped("runs", "show", str(run_dir), "--json", str(out), data_home=data_home)
    assert r.returncode == 0 and r.stdout.startswith(f"run {run_id}")  # the human view stays on stdout
    assert r.stderr.strip() == f"wrote {out}"
    assert json.loads(out.read_text())["episodes"][0]["task"] == "t1"
    blocked = tmp_path / "file"
    blocked.write_text("")
    r = _piped("runs", "show", str(run_dir), "--json", str(blocked / "x.json"), data_home=data_home)
    assert r.returncode == 1 and r.stderr.startswith(f"error: cannot write {blocked / 'x.json'}")
    assert r.stderr.count("\n") == 1


def test_data_with_brackets_is_printed_as_it_is():
    import io

    from rich.console import Console

    from ego2web_replay.commands._output import say, table, warn

    buf = io.StringIO()
    out = Console(file=buf, width=200)
    say(out, "shop: click selector='body[data-ready]' [/b] failed", status="FAIL", style="red")
    warn(out, "db [locked]")
    rows = table("task", "answer")
    rows.add_row("t[1]", "[note] $12")
    out.print(rows)
    text = buf.getvalue()
    assert "FAIL shop: click selector='body[data-ready]' [/b] failed" in text
    assert "warning: db [locked]" in text
    assert "t[1]" in text and "[note] $12" in text


def test_image_size_for_an_agent_without_a_model_is_refused_before_anything_is_written(long_run, data_home):
    root, _, args, _ = long_run
    r = _piped(*args, "--image-size", "640", "--run-id", "sized", data_home=data_home)
    assert r.returncode == 2 and "--image-size is for the model agents" in r.stderr, r.stderr
    assert not (root / "runs" / "sized").exists()


def test_every_result_command_writes_one_json_summary(long_run, data_home, tmp_path, capsys):
    """`--json -` is the only thing on stdout and `--json FILE` keeps the human view, for run, judge,
    ingest and snapshot verify|import|export (record: tests/test_record_cli.py), also when the command fails."""
    from ego2web_replay.cli import main
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    root, _, args, _ = long_run
    r = _piped(*args, "--run-id", "as-json", "--json", data_home=data_home)
    assert r.returncode == 1 and "every episode errored" in r.stderr  # it still fails, after the summary
    doc = json.loads(r.stdout)
    assert doc["run_dir"] == str(root / "runs" / "as-json")
    assert [(e["task_id"], e["mode"], e["end_reason"], e["ok"]) for e in doc["episodes"]] == [
        ("t1", "frozen", "setup_error", False)]

    run_dir = root / "runs" / "as-json"
    assert main(["judge", str(run_dir), "--judge", "rule", "--no-progress", "--no-db", "--json", "-"]) == 1
    out = capsys.readouterr().out
    judged = json.loads(out)  # nothing but the JSON, though every verdict errored
    assert judged["judge"] == "rule" and judged["summary"]["frozen"]["episode_errors"] == 1
    assert judged["verdicts"][0]["episode_error"] == "setup_error"

    db = tmp_path / "t.duckdb"
    summary = tmp_path / "ingest.json"
    assert main(["ingest", str(run_dir), "--db", str(db), "--json", str(summary)]) == 0
    human = capsys.readouterr().out
    assert human.startswith(f"{db}: ") and json.loads(summary.read_text()) == {
        "db": str(db), "snapshots": 0, "resources": 0, "runs": 1, "episodes": 1, "verdicts": 1, "warnings": []}

    sw = SnapshotWriter(tmp_path / "snaps", "t", snapshot_id="s1", compression="none")
    sw.writer.write_exchange(url="https://a.example/", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                             response_body=b"<html><body>hello</body></html>")
    sw.finalize()
    warc = tmp_path / "out.warc.gz"
    assert main(["snapshot", "export", str(sw.path), "--format", "warc.gz", "--out", str(warc), "--json", "-"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["path"] == str(warc) and exported["format"] == "warc.gz" and exported["bytes"] == warc.stat().st_size
    assert main(["snapshot", "import", str(warc), "--task", "t", "--snapshots", str(tmp_path / "back"),
                 "--id", "s2", "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert (imported["task_id"], imported["snapshot_id"], imported["exchanges"]) == ("t", "s2", 1)
    assert main(["snapshot", "verify", imported["path"], "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["ok"] is True and checked["problems"] == [] and checked["entries"] == 1
    (Path(imported["path"]) / "index.cdxj").write_text("")  # a broken snapshot: still one JSON document
    assert main(["snapshot", "verify", imported["path"], "--json"]) == 1
    out, err = capsys.readouterr()
    broken = json.loads(out)
    assert broken["ok"] is False and broken["problems"] and err.startswith("error: ")
