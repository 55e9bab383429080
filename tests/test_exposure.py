"""Exposure: loopback unless asked, a private data folder, shareable outputs 0644 and the CA key 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.config import check_private_dir
from ego2web_replay.errors import Ego2WebError
from ego2web_replay.models import AgentSpec, RunManifest, RunSettings, save_model
from ego2web_replay.snapshots.snapshot import SnapshotWriter


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _snapshot(root: Path) -> Path:
    sw = SnapshotWriter(root, "t", snapshot_id="s1")
    sw.writer.write_exchange(url="https://a.example/", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[], response_body=b"ok")
    sw.finalize()
    return sw.path


def test_serve_on_a_non_loopback_host_needs_allow_remote(tmp_path, capsys):
    snap = _snapshot(tmp_path)
    assert main(["serve", str(snap), "--host", "0.0.0.0", "--port", "0", "--duration", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert "--allow-remote" in err and "\n" not in err


def test_shareable_outputs_are_0644_and_the_ca_key_0600(tmp_path, ca):
    old = os.umask(0o077)  # even under a strict umask, what is made to be shared is readable
    try:
        snap = _snapshot(tmp_path)
        run_json = tmp_path / "run.json"
        save_model(run_json, RunManifest(run_id="r", started_at="2026-01-01T00:00:00Z", agent=AgentSpec(name="s"),
                                         agent_name="s", modes=["frozen"], settings=RunSettings()))
    finally:
        os.umask(old)
    for p in (snap / "manifest.json", snap / "index.cdxj", run_json):
        assert _mode(p) == 0o644, (p, oct(_mode(p)))
    assert _mode(ca.confdir / "mitmproxy-ca.pem") == 0o600  # the CA's private key
    assert _mode(ca.confdir) == 0o700


def test_a_world_writable_data_folder_is_fixed_or_refused(tmp_path):
    mine = tmp_path / "home"
    mine.mkdir()
    os.chmod(mine, 0o777)
    check_private_dir(mine)
    assert _mode(mine) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp: never "fixed", refused
    with pytest.raises(Ego2WebError, match="writable by other users"):
        check_private_dir(shared)
    assert _mode(shared) == 0o1777


def test_pickled_index_caches_others_can_write_are_not_loaded(tmp_path):
    from ego2web_replay.snapshots.index_cache import trusted

    cache = tmp_path / "c.pickle"
    cache.write_bytes(b"x")
    os.chmod(cache, 0o644)
    assert trusted(cache)
    os.chmod(cache, 0o666)
    assert not trusted(cache)
