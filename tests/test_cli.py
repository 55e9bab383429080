"""Every CLI command has help text and --help works; --version prints the version."""

from __future__ import annotations

import contextlib
import json
import subprocess

import click
import pytest
from click.testing import CliRunner

from ego2web_replay import __version__
from ego2web_replay.cli import cli


def _walk(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    if isinstance(group, click.Group):
        for name, sub in group.commands.items():
            yield from _walk(sub, path + (name,))


def test_every_command_has_help():
    runner = CliRunner()
    for path, command in _walk(cli):
        assert (command.help or "").strip(), f"command {' '.join(path) or '(root)'} has no help text"
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


# -- one line where a traceback was (issue 24) -------------------------------------------------
def _one_line(argv: list[str], capsys) -> str:
    """Run the CLI in this process: a non-zero exit with exactly one line on stderr, never a traceback."""
    from ego2web_replay.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("Usage:", "Try "))]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, (argv, code, err)
    return lines[0]


@pytest.fixture()
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled up (a real full disk, no write faked), unmounted afterwards."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        with contextlib.suppress(OSError), open(mnt / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_run_out_on_a_full_disk_is_one_line(full_disk, tmp_path, capsys):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"id": "t1", "instruction": "open", "start_url": "http://127.0.0.1:9/",
                                  "allowed_domains": ["127.0.0.1"]}]))
    line = _one_line(["run", str(tasks), "--agent", "scripted", "--mode", "live", "--out", str(full_disk / "runs"),
                      "--no-db"], capsys)
    assert line.startswith("error: ") and "disk is full" in line


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_stopped_by_sigterm_says_where_it_is_and_how_to_finish_it(tmp_path, workers):
    """SIGTERM reaches the runner alone (Ctrl-C reaches its whole process group): it still ends every episode
    under way at once, its workers' too, and kills their agent programs."""
    import signal
    import sys
    import time
    from pathlib import Path

    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"id": f"t{i}", "instruction": "open", "start_url": "http://127.0.0.1:9/"}
                                 for i in range(workers)]))
    exe = Path(sys.executable).with_name("ego2web-replay")
    marker = f"stopped-{tmp_path.name}"
    proc = subprocess.Popen([str(exe), "run", str(tasks), "--agent", f"command:sleep 60; echo {marker}", "--mode", "live",
                             "--guard", "loopback", "--out", str(tmp_path / "runs"), "--run-id", "r1", "--no-db",
                             "--no-progress", "--workers", str(workers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        program = f"/bin/sh -c sleep 60; echo {marker}"  # (inside each agent's sandbox)
        while len(subprocess.run(["pgrep", "-fx", program], capture_output=True).stdout.split()) < workers:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()  # every agent started
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - stopped < 20, err  # never waiting out the agents' 60 s
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert f"interrupted: run folder {tmp_path / 'runs' / 'r1'}; finish it with the same command and --resume" in err
    assert "Traceback" not in err and (tmp_path / "runs" / "r1" / "run.json").exists()
    time.sleep(0.5)  # nothing of the agent's program outlives the run
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout == b""


@pytest.mark.parametrize("command", [["ingest"], ["drift", "probe"]])
def test_an_over_long_path_name_is_one_line(command, tmp_path, capsys):
    line = _one_line([*command, str(tmp_path / ("a" * 300)), "--db", str(tmp_path / "x.duckdb")], capsys)
    assert line.startswith("error: ") and "longer than the file system allows" in line


def test_an_output_path_that_cannot_be_one_is_one_line_naming_it(tmp_path, capsys):
    from ego2web_replay.cli import main

    (tmp_path / "snaps").mkdir()
    (tmp_path / "runs").mkdir()
    db = tmp_path / "x.duckdb"
    # nothing to ingest yet: the database is made all the same, so the report that reads it next finds it
    assert main(["ingest", str(tmp_path / "snaps"), str(tmp_path / "runs"), "--db", str(db)]) == 0 and db.exists()
    capsys.readouterr()
    afile = tmp_path / "tasks.jsonl"
    afile.write_text("{}\n")
    line = _one_line(["report", "--db", str(db), "--out", str(afile / "rep")], capsys)
    assert line == f"error: {afile / 'rep'}: a name on this path is a file, not a folder: choose another path"
    line = _one_line(["report", "--db", str(db), "--out", "/proc/rep"], capsys)
    assert line.startswith("error: /proc/rep: ")
    assert afile.read_text() == "{}\n"  # nothing already written is lost


def test_only_a_path_error_that_names_its_path_is_the_users():
    import errno

    from ego2web_replay.errors import storage_error

    named = storage_error(NotADirectoryError(errno.ENOTDIR, "Not a directory", "out/x"))
    assert str(named) == "out/x: a name on this path is a file, not a folder: choose another path"
    # no path named (a socket, an os.kill, a bug): not turned into a user's one line about a path
    assert storage_error(FileNotFoundError(errno.ENOENT, "No such file or directory")) is None
    assert storage_error(PermissionError(errno.EPERM, "Operation not permitted")) is None
    assert "disk is full" in str(storage_error(OSError(errno.ENOSPC, "No space left on device")))


@pytest.mark.parametrize("window", ["99999999999999999999d", "1e400s", "nan", "inf"])
def test_a_window_too_large_or_not_a_number_is_one_line(window, tmp_path, capsys):
    line = _one_line(["snapshot", "extend", str(tmp_path / "a"), str(tmp_path / "b"), "--window", window], capsys)
    assert line.startswith(f"error: invalid --window '{window}'")


@pytest.mark.parametrize("value", ["nan", "inf", "1e300"])
def test_a_probe_window_that_is_no_finite_number_of_hours_is_a_usage_error(value, tmp_path, capsys):
    line = _one_line(["compare", "--db", str(tmp_path / "x.duckdb"), "--probe-window", value], capsys)
    assert line.startswith("Error: Invalid value for '--probe-window'")
