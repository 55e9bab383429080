"""WARC digests: computing, normalising and checking ``WARC-Block-Digest`` / ``WARC-Payload-Digest``.

Digests are ``<algorithm>:<value>``; tools write the value in base32 (the
standard), hex or base64. The index keeps sha1 digests in base32 without the
prefix, whatever the writer used.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .reader import ArchiveRecord

__all__ = ["sha1_digest", "normalize_digest", "digest_problems"]


def sha1_digest(data: bytes) -> str:
    """The standard WARC digest of ``data``: ``sha1:`` + base32."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def normalize_digest(value: str | None) -> str:
    """A digest as the index keeps it: no ``sha1:`` prefix, sha1 in base32 (hex/base64 converted)."""
    if not value:
        return ""
    alg, sep, text = value.partition(":")
    if not sep:
        alg, text = "sha1", value
    text = text.strip()
    if alg.strip().lower() not in ("sha1", "sha-1"):
        return value.strip()
    raw: bytes | None = None
    try:
        if len(text) == 40:
            raw = bytes.fromhex(text)
        elif len(text) in (27, 28):
            raw = base64.b64decode(text + "=" * (28 - len(text)), altchars=b"-_" if "-" in text or "_" in text else None)
    except ValueError:
        raw = None
    if raw is not None and len(raw) == 20:
        return base64.b32encode(raw).decode("ascii")
    return text.upper() if len(text) == 32 else text


def _check(expected: str | None, candidates: list[bytes]) -> bool | None:
    """Compare a ``alg:value`` digest with the candidates; None if it cannot be checked."""
    if not expected or ":" not in expected:
        return None
    alg, _, value = expected.partition(":")
    alg = alg.strip().lower().replace("-", "")
    if alg not in ("sha1", "sha256", "md5", "sha512"):
        return None
    value = value.strip()
    for data in candidates:
        digest = hashlib.new(alg, data).digest()
        forms = {
            base64.b32encode(digest).decode("ascii"),
            digest.hex(),
            base64.b64encode(digest).decode("ascii"),
            base64.urlsafe_b64encode(digest).decode("ascii"),
        }
        if value in forms or value.upper() in forms or value.lower() in forms:
            return True
    return False


def digest_problems(record: ArchiveRecord, path: Path | None = None) -> list[str]:
    """Recompute the block and payload digests of a record; describe each mismatch."""
    where = f"{path}: " if path else ""
    where += f"{record.rec_type} record at byte {record.offset} ({record.url or record.record_id})"
    problems = []
    if _check(record.block_digest, [record.block]) is False:
        problems.append(f"{where}: WARC-Block-Digest does not match the stored block")
    if record.rec_type != "revisit":
        candidates = [record.stored_payload]
        if record.chunked:
            candidates.append(record.payload)
        if record.http_headers is None:
            candidates.append(record.block)
        if _check(record.payload_digest, candidates) is False:
            problems.append(f"{where}: WARC-Payload-Digest does not match the stored payload")
    return problems
