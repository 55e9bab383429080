"""A seeded fuzzer over task files, archives, indexes and manifests: every case ends in a result or one line.

Each case mutates a valid input (byte flips, cuts, insertions, huge numbers,
deep nesting, odd ids) and runs the CLI on it in this process. The only
acceptable outcomes are exit 0 or a one-line ``error:``; any other exception
(a traceback) fails the test with the seed and case that produced it.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import traceback

import pytest

from ego2web_replay.cli import main
from ego2web_replay.snapshots.snapshot import SnapshotWriter

SEED = 13
CASES = 300

GOOD_TASKS = [{"id": "t1", "instruction": "find the price", "start_url": "https://shop.example/",
               "allowed_domains": ["shop.example"], "reference_actions": [{"kind": "goto", "url": "https://shop.example/"}]}]

NASTY = [b"[" * 5000, b"{" * 3000, b"9" * 5000, b"-1", b"1e999999", b"\x00\xff\xfe", b'"' + b"\\" * 99 + b'"',
         b"Content-Length: 1000000000000000\r\n", b"\r\n\r\n", b"WARC/1.1\r\n", b"../../etc/hostname", b"/etc/hostname",
         "é😀".encode(), b"null", b"[]", b"{}", b"\xfd\x2f\xb5\x28", b"\x1f\x8b\x08\x00"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        pos = rng.randrange(len(data) + 1) if data else 0
        if op == 0 and data:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1:  # cut
            data = data[:pos]
        elif op == 2:  # insert something nasty
            data[pos:pos] = rng.choice(NASTY)
        elif op == 3 and data:  # delete a span
            data[pos:pos + rng.randint(1, 64)] = b""
        else:  # duplicate a span
            data[pos:pos] = data[max(0, pos - 200):pos]
    return bytes(data)


def _task_variants(rng: random.Random) -> bytes:
    tasks = json.loads(json.dumps(GOOD_TASKS))
    t = tasks[0]
    choice = rng.randrange(6)
    if choice == 0:
        t["id"] = rng.choice(["x" * 300, "../x", "a b", "", ".", "ok"])
    elif choice == 1:
        t["start_url"] = rng.choice(["file:///etc/passwd", "javascript:1", "https://" + "a" * 5000, 12])
    elif choice == 2:
        t["reference_actions"] = [{"kind": rng.choice(["goto", "click", "nope", None]), "x": 10**rng.randint(1, 400)}]
    elif choice == 3:
        t["evidence"] = [{"start": rng.choice([-1, 10**50, "x"]), "end": 1}]
    elif choice == 4:
        t["metadata"] = json.loads("[" * 150 + "]" * 150)
    text = json.dumps(tasks).encode()
    return _mutate(rng, text) if rng.random() < 0.7 else text


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """A small valid snapshot (gzip and zstd) to mutate."""
    root = tmp_path_factory.mktemp("fuzz-seeds")
    out = {}
    for comp in ("gz", "zst", "none"):
        sw = SnapshotWriter(root / comp, "seed", snapshot_id="s1", compression=comp)
        for i in range(3):
            sw.writer.write_exchange(url=f"https://shop.example/p{i}?q={i}", method="GET",
                                     request_headers=[("Accept", "*/*")], request_body=b"", status=200, reason="OK",
                                     response_headers=[("Content-Type", "text/html")],
                                     response_body=f"<html><body>page {i}</body></html>".encode())
        sw.writer.write_exchange(url="https://shop.example/api", method="POST",
                                 request_headers=[("Content-Type", "application/json")],
                                 request_body=b'{"q": {"deep": [1, 2, {"x": "y"}]}}', status=200, reason="OK",
                                 response_headers=[("Content-Type", "application/json")], response_body=b"{}")
        sw.finalize()
        out[comp] = sw.path
    return out


def _run(argv: list[str], capsys) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (argv, code, err)
    if code:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert lines and "Traceback" not in err, (argv, err)


def test_fuzz_task_files_archives_indexes_and_manifests(seeds, tmp_path, capsys):
    rng = random.Random(SEED)
    for case in range(CASES):
        kind = case % 5
        work = tmp_path / f"c{case}"
        work.mkdir()
        try:
            if kind == 0:  # a task file
                p = work / rng.choice(["tasks.json", "tasks.jsonl"])
                p.write_bytes(_task_variants(rng))
                _run(["record", str(p), "--snapshots", str(work / "s"), "--task", "nosuch"], capsys)
            elif kind in (1, 2):  # an archive to import
                comp = rng.choice(list(seeds))
                src = next(seeds[comp].glob("archive.warc*"))
                p = work / src.name
                p.write_bytes(_mutate(rng, src.read_bytes()))
                _run(["snapshot", "import", str(p), "--task", "fz", "--snapshots", str(work / "s")], capsys)
            elif kind == 3:  # a snapshot whose index or manifest is damaged
                comp = rng.choice(list(seeds))
                snap = work / "snap" / "seed" / "s1"
                shutil.copytree(seeds[comp], snap)
                target = snap / rng.choice(["index.cdxj", "manifest.json"])
                target.write_bytes(_mutate(rng, target.read_bytes()))
                _run(["snapshot", "verify", str(snap)], capsys)
                _run(["snapshot", "show", str(snap)], capsys)
            else:  # a damaged archive inside a snapshot
                comp = rng.choice(list(seeds))
                snap = work / "snap" / "seed" / "s1"
                shutil.copytree(seeds[comp], snap)
                archive = next(snap.glob("archive.warc*"))
                archive.write_bytes(_mutate(rng, archive.read_bytes()))
                _run(["snapshot", "verify", str(snap)], capsys)
        except AssertionError:
            raise
        except BaseException as e:  # noqa: BLE001 - a traceback is the failure this test hunts
            where = traceback.extract_tb(e.__traceback__)[-3:]
            pytest.fail(f"seed {SEED} case {case} (kind {kind}): {type(e).__name__}: {e} at "
                        + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in reversed(where)))
        finally:
            shutil.rmtree(work, ignore_errors=True)


def test_a_gzip_seed_is_valid(seeds):
    data = gzip.decompress(next(seeds["gz"].glob("archive.warc*")).read_bytes())
    assert data.startswith(b"WARC/1.1")
