"""A suite recorded on the local test site travels as a pack and still replays with zero misses.

Three tasks are recorded live (``.warc.gz``, one archive per task; each page
load fetches the site's 5 MB binary), packed (deduplicated, dictionary), and
unpacked into a fresh snapshots folder; every frozen episode of the suite then
runs from the unpacked snapshots. One unpacked snapshot is exported to WACZ
and served by pywb on its own.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ego2web_replay.models import RunSettings, load_trajectory
from ego2web_replay.recorder.session import RecordOptions, record_task
from ego2web_replay.snapshots import Snapshot
from ego2web_replay.snapshots.export import export_snapshot
from ego2web_replay.snapshots.pack import pack_suite, unpack_suite
from ego2web_replay.tasks import load_tasks
from ego2web_replay.testing.pywb import PywbCollection

pytestmark = pytest.mark.slow


def _tasks(base: str) -> list[dict]:
    ready = {"kind": "wait", "selector": "body[data-ready='1']"}
    return [
        {"id": "shop-home", "instruction": "What is the shop called?", "start_url": base + "/",
         "reference_actions": [{"kind": "goto", "url": base + "/"}, ready, {"kind": "answer", "answer": "Test Shop"}]},
        {"id": "shop-product", "instruction": "Find snack 42", "start_url": base + "/",
         "reference_actions": [{"kind": "goto", "url": base + "/"}, ready,
                               {"kind": "click", "selector": "#product-link"}, {"kind": "answer", "answer": "150 kcal"}]},
        {"id": "shop-clock", "instruction": "Open the clock", "start_url": base + "/",
         "reference_actions": [{"kind": "goto", "url": base + "/"}, ready,
                               {"kind": "goto", "url": base + "/clock"}, ready,
                               {"kind": "answer", "answer": "clock"}]},
    ]


@pytest.fixture(scope="module")
def recorded_suite(site, ca, tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    tasks_file = root / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in _tasks(site.https_url)), "utf-8")
    suite = load_tasks(tasks_file)
    opts = RecordOptions(guard="loopback", upstream_ca=site.tls.ca_cert, compression="gz")
    for task in suite.tasks:
        result = record_task(task, root / "snapshots", opts, ca=ca)
        assert result.ok, result.error
    return root, tasks_file, suite


def test_pack_is_under_half_the_gzip_archives_and_every_frozen_episode_replays(recorded_suite, tmp_path):
    from ego2web_replay.runner.run import run_suite

    root, tasks_file, suite = recorded_suite
    gz_bytes = sum(p.stat().st_size for p in (root / "snapshots").glob("*/*/archive.warc.gz"))
    pack = tmp_path / "suite.pack"
    packed = pack_suite(root / "snapshots", pack, tasks_file=tasks_file)
    assert packed.revisits > 0 and packed.dictionary_bytes > 0
    assert pack.stat().st_size < gz_bytes / 2, (pack.stat().st_size, gz_bytes)

    dest = tmp_path / "unpacked"
    unpacked = unpack_suite(pack, dest)
    assert len(unpacked.snapshots) == 3 and unpacked.tasks_file is not None
    run_dir, results = run_suite(load_tasks(unpacked.tasks_file), agent_name="scripted", out=tmp_path / "runs",
                                 settings=RunSettings(mode="frozen", snapshots_root=str(dest), guard="loopback",
                                                      timeout_s=90, action_timeout_s=20))
    assert len(results) == 3
    for task in suite.tasks:
        t = load_trajectory(run_dir / "episodes" / task.id / "frozen")
        assert t.end_reason == "answered", (task.id, t.error)
        assert t.replay is not None and t.replay.miss == 0 and t.replay.exact > 0, (task.id, t.replay)
        assert Path(t.snapshot_path).is_relative_to(dest)


def test_an_exported_deduplicated_snapshot_replays_alone_in_pywb(recorded_suite, tmp_path):
    root, tasks_file, _ = recorded_suite
    dest = tmp_path / "unpacked"
    unpack_suite(pack_suite(root / "snapshots", tmp_path / "s.pack", tasks_file=tasks_file).path, dest)
    snap_dir = next((dest / "shop-product").iterdir())
    exported = export_snapshot(snap_dir, tmp_path / "product.wacz", "wacz")
    assert exported.materialized > 0
    snap = Snapshot.open(snap_dir)
    once = Counter(e.url for e in snap.entries())
    compared = 0
    with PywbCollection(tmp_path / "pywb", exported.path) as coll:
        for e in snap.entries():
            if e.method != "GET" or once[e.url] > 1:
                continue
            expected = snap.resolve(e)
            assert coll.get(e.timestamp, e.url) == (expected.http_status, expected.payload), e.url
            compared += 1
    assert compared >= 8
