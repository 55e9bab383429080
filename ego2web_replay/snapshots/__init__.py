"""The on-disk snapshot: WARC 1.1 archives (one zstd frame per record), the CDXJ index, the manifest.

A snapshot folder is ``snapshots/<task-id>/<snapshot-id>/`` with
``archive.warc.zst`` (or ``.warc.gz``), ``index.cdxj``, ``manifest.json`` and
``screenshots/``. Write with :class:`SnapshotWriter` (or :class:`ArchiveWriter`
for a bare archive), read with :class:`Snapshot`, :func:`iter_records` and
:func:`read_record`, check with :func:`verify_snapshot`. :class:`Snapshot` reads its
files through a :class:`Storage` (:class:`LocalStorage` by default), so another
storage backend only implements that interface.
"""

from .cdxj import (
    CdxjEntry,
    IndexEntry,
    build_index,
    post_query,
    read_index,
    request_body_query,
    surt_key,
    write_index,
)
from .importer import import_warc
from .reader import ArchiveRecord, RecordInfo, ScanResult, iter_records, read_record, scan_archive
from .snapshot import Snapshot, SnapshotInfo, SnapshotWriter, latest_snapshot, list_snapshots
from .storage import LocalStorage, Storage, copy_snapshot
from .verify import VerifyReport, reindex_snapshot, verify_snapshot
from .warc import ArchiveWriter, RecordLocation

__all__ = [
    "ArchiveRecord",
    "ArchiveWriter",
    "CdxjEntry",
    "IndexEntry",
    "LocalStorage",
    "RecordInfo",
    "RecordLocation",
    "ScanResult",
    "Snapshot",
    "SnapshotInfo",
    "SnapshotWriter",
    "Storage",
    "VerifyReport",
    "build_index",
    "copy_snapshot",
    "import_warc",
    "iter_records",
    "latest_snapshot",
    "list_snapshots",
    "post_query",
    "read_index",
    "read_record",
    "reindex_snapshot",
    "request_body_query",
    "scan_archive",
    "surt_key",
    "verify_snapshot",
    "write_index",
]
