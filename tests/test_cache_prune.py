"""``ego2web-replay cache``: the index cache's files are marked when used and pruned when not."""

from __future__ import annotations

import os
import random
import time

import pytest
from test_mapped_index import _captures, _write_cdxj

from ego2web_replay.cli import main
from ego2web_replay.replay import mapped
from ego2web_replay.replay.mapped import MappedMatchIndex
from ego2web_replay.snapshots.index_cache import cache_dir, cache_files
from ego2web_replay.snapshots.index_map import open_index_map

DAY = 86400


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EGO2WEB_REPLAY_HOME", str(tmp_path / "home"))
    return tmp_path


OLD = time.time() - 40 * DAY


def _age(path):
    """Make ``path`` look last used and written 40 days ago (always the same instant: the map's
    modification time is part of the canonical keys' file name)."""
    os.utime(path, (OLD, OLD))


def test_files_in_use_are_kept_and_the_rest_pruned(home, capsys):
    index = home / "index.cdxj"
    _write_cdxj(index, _captures(random.Random(7), 30))
    open_index_map(index).close()  # the mapped index, written 40 days ago ...
    (map_path,) = [f.path for f in cache_files()]
    _age(map_path)
    MappedMatchIndex.open([index]).close()  # ... and the canonical keys (keyed by the map's mtime)
    built = {f.path for f in cache_files()}
    assert len(built) == 2
    for path in built:  # neither used since
        _age(path)
    stale = cache_dir() / "0123456789abcdef0123456789abcdef.sorted"  # an index that changed since
    stale.write_bytes(b"x" * 1000)
    _age(stale)

    builds = mapped.BUILDS[0]
    MappedMatchIndex.open([index]).close()  # used again: marked, not rebuilt
    assert mapped.BUILDS[0] == builds and {f.path for f in cache_files()} == built | {stale}

    assert main(["cache", "prune", "--days", "30", "--dry-run"]) == 0
    assert "would remove 1 files" in capsys.readouterr().out and stale.exists()
    assert main(["cache", "prune", "--days", "30"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 files (0.0 MiB) not used for 30 days; kept 2" in out
    assert not stale.exists() and all(p.exists() for p in built)

    assert main(["cache", "info"]) == 0
    assert "2 files" in capsys.readouterr().out
    assert main(["cache", "prune", "--days", "0"]) == 0  # everything: rebuilt when next needed
    assert cache_files() == []
    again = MappedMatchIndex.open([index])
    assert again.match("GET", "https://shop.example/poll?since=1").outcome == "exact"
    again.close()


def test_bad_days_is_one_clear_error(home, capsys):
    assert main(["cache", "prune", "--days", "-1"]) == 2
    assert "--days" in capsys.readouterr().err
    assert main(["cache", "info"]) == 0
    assert "empty" in capsys.readouterr().out


def test_mark_used_sets_the_access_time_and_keeps_the_modification_time(tmp_path):
    from ego2web_replay.snapshots.index_cache import mark_used

    f = tmp_path / "x.sorted"
    f.write_bytes(b"x")
    _age(f)
    mark_used(f)  # without it, only a mount's relatime setting (not noatime) would say the file was used
    st = f.stat()
    assert st.st_mtime == pytest.approx(OLD) and st.st_atime > time.time() - 60
    mark_used(tmp_path / "missing")  # nothing to mark: no error
