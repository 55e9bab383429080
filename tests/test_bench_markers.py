"""BENCHMARKS.md section markers: update_section refuses a file whose markers nest or lack their pair."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _common  # noqa: E402


def _sec(name: str, body: str) -> str:
    return f"<!-- bench:{name}:start -->\n{body}\n<!-- bench:{name}:end -->\n"


def test_update_section_rewrites_one_section(tmp_path: Path) -> None:
    md = tmp_path / "B.md"
    md.write_text("# B\n\n" + _sec("a", "old a") + "\n" + _sec("b", "old b"))
    _common.update_section("a", "new a", md)
    text = md.read_text()
    assert "new a" in text and "old a" not in text and "old b" in text


@pytest.mark.parametrize("text", [
    "<!-- bench:a:start -->\n<!-- bench:b:start -->\nx\n<!-- bench:a:end -->\n<!-- bench:b:end -->\n",
    "<!-- bench:a:start -->\nx\n",
    "<!-- bench:a:end -->\n",
    _sec("a", "1") + _sec("a", "2"),
])
def test_nested_or_unpaired_markers_are_refused(tmp_path: Path, text: str) -> None:
    md = tmp_path / "B.md"
    md.write_text(text)
    with pytest.raises(SystemExit, match="repair the markers"):
        _common.update_section("a", "new", md)
    assert md.read_text() == text


def test_repository_benchmarks_md_markers_are_well_formed() -> None:
    _common.check_markers(_common.BENCHMARKS_MD.read_text("utf-8"), _common.BENCHMARKS_MD)


def test_sigterm_runs_a_benchmarks_cleanup(tmp_path: Path) -> None:
    """A benchmark killed with SIGTERM (``timeout``, ``kill``) still runs its ``finally`` blocks."""
    import signal
    import subprocess

    work = tmp_path / "work"
    script = (f"import sys, time; sys.path.insert(0, {str(Path(_common.__file__).parent)!r})\n"
              "import _common\n_common.exit_on_sigterm()\n"
              f"work = __import__('pathlib').Path({str(work)!r}); work.mkdir()\n"
              "try:\n    print('ready', flush=True); time.sleep(60)\n"
              "finally:\n    __import__('shutil').rmtree(work)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready" and work.is_dir()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not work.exists()
