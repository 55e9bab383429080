"""A content-addressed cache of LLM calls.

Each call is stored as ``<cache-dir>/<sha256>.json`` where the hash is taken
over the canonical request: the model, the messages (images replaced by the
sha256 of their bytes) and the sampling parameters. Re-judging a run reads
the same files, so it costs nothing and gives the same verdicts; the folder
(by default ``<run>/judge-cache/``) can be shipped with the run so that others
reproduce the judgment exactly.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ..atomic import atomic_write_text

__all__ = ["CacheEntry", "CallCache", "request_key", "canonical_json"]

CACHE_VERSION = 1


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the form that is hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: dict[str, Any]) -> str:
    """The cache key of a canonical request (sha256 hex of its canonical JSON)."""
    return hashlib.sha256(canonical_json({"v": CACHE_VERSION, **request}).encode("utf-8")).hexdigest()


class CacheEntry(BaseModel):
    """One cached call: the canonical request and the reply the model gave."""

    version: int = CACHE_VERSION
    key: str
    request: dict[str, Any] = Field(description="Canonical request (images as sha256).")
    reply: str = Field(description="The raw text of the accepted reply.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    created_at: datetime | None = None


class CallCache:
    """A folder of :class:`CacheEntry` files named by their key."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        """The entry for ``key``, or None (an unreadable entry counts as a miss)."""
        try:
            return CacheEntry.model_validate_json(self.path(key).read_text("utf-8"))
        except (FileNotFoundError, ValidationError, ValueError, OSError):
            return None

    def put(self, key: str, request: dict[str, Any], reply: str, prompt_tokens: int,
            completion_tokens: int) -> CacheEntry:
        entry = CacheEntry(key=key, request=request, reply=reply, prompt_tokens=prompt_tokens,
                           completion_tokens=completion_tokens, created_at=datetime.now(UTC))
        atomic_write_text(self.path(key), entry.model_dump_json(indent=1) + "\n")
        return entry

    def endpoints(self) -> dict[str, int]:
        """How many entries were made at each endpoint (the key holds it: another endpoint's are not found)."""
        counts: dict[str, int] = {}
        for path in self.directory.glob("*.json") if self.directory.is_dir() else ():
            try:
                endpoint = str(json.loads(path.read_text("utf-8")).get("request", {}).get("endpoint"))
            except (OSError, ValueError, AttributeError):
                continue
            counts[endpoint] = counts.get(endpoint, 0) + 1
        return counts

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*.json")) if self.directory.is_dir() else 0
