"""Suite packs: a suite's snapshots, deduplicated, in one file that is checked on arrival.

A pack is a zip file (archives stored, text deflated)::

    pack.json                       format, creation time, snapshots, stores, sha256 + size of every file
    tasks/<task file>               the suite's task file, when given
    snapshots/<task>/<snapshot>/    archive.warc.zst (revisits for shared payloads), index.cdxj,
                                    manifest.json, screenshots/
    snapshots/.shared/<store-id>/   the suite's shared payload store (see :mod:`.dedup`)

:func:`unpack_suite` extracts into a staging folder beside the destination,
checks every file against ``pack.json`` (and the zip's own CRCs), verifies
every snapshot, and only then moves the snapshots into place: a pack with one
flipped byte is refused, naming the file, and nothing of it is left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from .. import __version__
from ..errors import SnapshotError
from .dedup import STORE_MANIFEST, dedup_snapshots
from .index_cache import warm_cache
from .snapshot import latest_snapshot, list_snapshots, load_manifest
from .verify import verify_snapshot

__all__ = ["PackResult", "UnpackResult", "choose_snapshots", "pack_suite", "unpack_suite", "PACK_MANIFEST"]

PACK_MANIFEST = "pack.json"
PACK_FORMAT = "ego2web-replay-pack"
_STORED_SUFFIXES = (".zst", ".gz", ".png", ".jpg", ".jpeg", ".webp")


@dataclass
class PackResult:
    """What :func:`pack_suite` wrote."""

    path: Path
    snapshots: list[str]
    files: int
    bytes: int
    source_bytes: int
    revisits: int
    stored_payloads: int
    dictionary_bytes: int
    notes: list[str] = field(default_factory=list)


@dataclass
class UnpackResult:
    """What :func:`unpack_suite` placed under the snapshots folder."""

    root: Path
    snapshots: list[Path]
    stores: list[Path]
    tasks_file: Path | None
    files_checked: int


def choose_snapshots(root: Path, tasks_file: Path | None = None) -> list[Path]:
    """The latest complete snapshot of each task under ``root`` (of each task of ``tasks_file`` if given)."""
    if tasks_file is not None:
        from ..models import load_tasks

        suite = load_tasks(tasks_file)
        missing, chosen = [], []
        for task in suite.tasks:
            try:
                chosen.append(latest_snapshot(root, task.id))
            except SnapshotError:
                missing.append(task.id)
        if missing:
            raise SnapshotError(f"no snapshot under {root} for task(s) {', '.join(missing)}; record them first "
                                "or pack without --tasks")
        return chosen
    latest: dict[str, Path] = {}
    for info in list_snapshots(root):  # newest first per task
        if info.complete and info.task_id not in latest:
            latest[info.task_id] = info.path
    if not latest:
        raise SnapshotError(f"{root}: no complete snapshots to pack")
    return list(latest.values())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack_suite(root: Path, out: Path, *, tasks_file: Path | None = None, dictionary: bool = True,
               min_size: int = 256) -> PackResult:
    """Pack the latest snapshot of each task under ``root`` (of each task in ``tasks_file`` if given)."""
    root, out = Path(root), Path(out)
    if not root.is_dir():
        raise SnapshotError(f"{root}: snapshots folder not found")
    if out.is_dir():
        raise SnapshotError(f"{out}: is a folder; give the pack file to write, e.g. {out / 'suite.pack'}")
    sources = choose_snapshots(root, tasks_file)
    source_bytes = sum(p.stat().st_size for s in sources for p in s.rglob("*") if p.is_file())
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pack-", dir=out.parent) as tmp:
        staged = Path(tmp) / "snapshots"
        result = dedup_snapshots(sources, staged, min_size=min_size, dictionary=dictionary, map_indexes=False)
        members: list[tuple[str, Path]] = []
        if tasks_file is not None:
            members.append((f"tasks/{Path(tasks_file).name}", Path(tasks_file)))
        for path in sorted(p for p in staged.rglob("*") if p.is_file()):
            members.append((f"snapshots/{path.relative_to(staged).as_posix()}", path))
        files = [{"path": name, "sha256": _sha256(path), "size": path.stat().st_size} for name, path in members]
        manifest = {
            "format": PACK_FORMAT, "version": 1, "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "software": f"ego2web-replay {__version__}",
            "tasks_file": f"tasks/{Path(tasks_file).name}" if tasks_file is not None else None,
            "snapshots": [p.relative_to(staged).as_posix() for p in result.snapshots],
            "stores": [result.store.relative_to(staged).as_posix()],
            "dictionary": result.dictionary_bytes > 0, "files": files,
        }
        partial = Path(tmp) / "suite.pack"
        with zipfile.ZipFile(partial, "w") as zf:
            for name, path in members:
                method = zipfile.ZIP_STORED if name.endswith(_STORED_SUFFIXES) else zipfile.ZIP_DEFLATED
                with open(path, "rb") as src, zf.open(_info(name, method), "w") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        # the digest of each member's bytes as stored in the zip too: a flipped byte that leaves the
        # decompressed content unchanged (a deflate flag, padding) is still caught
        with open(partial, "rb") as fh, zipfile.ZipFile(partial) as zf:
            raw = {info.filename: _raw_sha256(fh, info) for info in zf.infolist()}
        for entry in files:
            entry["stored_sha256"] = raw[str(entry["path"])]
        with zipfile.ZipFile(partial, "a") as zf:  # the manifest last, uncompressed (its CRC covers every byte)
            zf.writestr(_info(PACK_MANIFEST, zipfile.ZIP_STORED), json.dumps(manifest, indent=2) + "\n")
        os.replace(partial, out)
    return PackResult(out, manifest["snapshots"], len(files), out.stat().st_size,  # type: ignore[arg-type]
                      source_bytes, result.revisits, result.stored_payloads, result.dictionary_bytes, result.notes)


def _raw_sha256(fh: BinaryIO, info: zipfile.ZipInfo) -> str:
    """sha256 of a member's data as stored in the zip (after its local header)."""
    fh.seek(info.header_offset)
    header = fh.read(30)
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        raise SnapshotError(f"{info.filename}: no zip local header at byte {info.header_offset}")
    fh.seek(info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little"))
    h, left = hashlib.sha256(), info.compress_size
    while left > 0:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


def _info(name: str, method: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0))
    info.compress_type = method
    info.external_attr = 0o644 << 16
    return info


def _safe_member(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise SnapshotError(f"refusing a pack member with an unsafe path: {name!r}")
    return rel


def _read_manifest(zf: zipfile.ZipFile, pack: Path) -> dict:
    try:
        manifest = json.loads(zf.read(PACK_MANIFEST))
    except KeyError:
        raise SnapshotError(f"{pack}: not a suite pack ({PACK_MANIFEST} is missing)") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise SnapshotError(f"{pack}: {PACK_MANIFEST} is corrupt ({e}); refusing the pack") from None
    except (ValueError, UnicodeDecodeError):
        raise SnapshotError(f"{pack}: {PACK_MANIFEST} is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != PACK_FORMAT:
        raise SnapshotError(f"{pack}: not a suite pack ({PACK_MANIFEST} has no format {PACK_FORMAT!r})")
    return manifest


def _extract_checked(zf: zipfile.ZipFile, pack: Path, manifest: dict, staging: Path) -> int:
    try:
        listed = {str(f["path"]): (str(f["sha256"]), int(f["size"])) for f in manifest["files"]}
        stored = {str(f["path"]): str(f["stored_sha256"]) for f in manifest["files"]}
    except (KeyError, TypeError, ValueError):
        raise SnapshotError(f"{pack}: {PACK_MANIFEST} has no valid file list") from None
    names = [n for n in zf.namelist() if n != PACK_MANIFEST and not n.endswith("/")]
    extra = sorted(set(names) - set(listed))
    if extra:
        raise SnapshotError(f"{pack}: {extra[0]} is in the pack but not in {PACK_MANIFEST}; refusing the pack")
    missing = sorted(set(listed) - set(names))
    if missing:
        raise SnapshotError(f"{pack}: {missing[0]} is listed in {PACK_MANIFEST} but missing; refusing the pack")
    with open(pack, "rb") as fh:
        for info in zf.infolist():
            if info.filename in stored and _raw_sha256(fh, info) != stored[info.filename]:
                raise SnapshotError(f"{pack}: {info.filename}: its stored bytes differ from {PACK_MANIFEST} "
                                    "(damaged in transit?); refusing the pack")
    for name in names:
        target = staging / _safe_member(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        h, size = hashlib.sha256(), 0
        try:
            with zf.open(name) as src, open(target, "wb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):  # noqa: B023 - consumed at once
                    h.update(chunk)
                    size += len(chunk)
                    dst.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError) as e:
            raise SnapshotError(f"{pack}: {name} is corrupt ({e}); refusing the pack") from None
        if (h.hexdigest(), size) != listed[name]:
            raise SnapshotError(f"{pack}: {name}: sha256 differs from {PACK_MANIFEST}; refusing the pack")
    return len(names)


def unpack_suite(pack: Path, dest: Path, *, tasks_out: Path | None = None) -> UnpackResult:
    """Check every file of ``pack``, verify its snapshots, then place them under ``dest``.

    Nothing is written under ``dest`` unless everything checks out. A snapshot
    that already exists under ``dest`` is an error; a shared store already
    there with the same files is reused.
    """
    pack, dest = Path(pack), Path(dest)
    if not pack.is_file():
        raise SnapshotError(f"{pack}: pack file not found")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        zf = zipfile.ZipFile(pack)
    except (zipfile.BadZipFile, OSError) as e:
        raise SnapshotError(f"{pack}: not a valid pack (zip) file ({e})") from None
    with zf, tempfile.TemporaryDirectory(prefix=".unpack-", dir=dest) as tmp:
        staging = Path(tmp)
        manifest = _read_manifest(zf, pack)
        checked = _extract_checked(zf, pack, manifest, staging)
        root = staging / "snapshots"
        snapshots = [str(s) for s in manifest.get("snapshots", [])]
        stores = [str(s) for s in manifest.get("stores", [])]
        for rel in snapshots + stores:
            _safe_member(rel)
        for rel in snapshots:
            report = verify_snapshot(root / rel)
            if not report.ok:
                raise SnapshotError(f"{pack}: snapshot {rel} does not verify ({report.problems[0]}); refusing the pack")
        clashes = [rel for rel in snapshots if (dest / rel).exists()]
        clashes += [rel for rel in stores if (dest / rel).exists()
                    and (dest / rel / STORE_MANIFEST).read_bytes() != (root / rel / STORE_MANIFEST).read_bytes()]
        tasks_file = None
        if manifest.get("tasks_file"):
            tasks_src = staging / _safe_member(str(manifest["tasks_file"]))
            tasks_file = Path(tasks_out) if tasks_out is not None else dest / tasks_src.name
            if tasks_file.exists() and tasks_file.read_bytes() != tasks_src.read_bytes():
                clashes.append(str(tasks_file))
        if clashes:
            raise SnapshotError(f"{dest / clashes[0]} already exists; unpack into another folder")
        placed_stores = []
        for rel in stores:
            if not (dest / rel).exists():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(root / rel), dest / rel)
            placed_stores.append(dest / rel)
        placed = []
        for rel in snapshots:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(root / rel), dest / rel)
            placed.append(dest / rel)
        for folder in placed:  # a large snapshot's mapped index, keyed by where its index now lies
            warm_cache(folder / load_manifest(folder).index)
        if tasks_file is not None:
            tasks_file.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(staging / _safe_member(str(manifest["tasks_file"])), tasks_file)
    return UnpackResult(dest, placed, placed_stores, tasks_file, checked)
