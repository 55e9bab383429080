"""The manifest of a snapshot folder: what was captured, when, how, and the files' digests."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from .base import FileModel, check_id, check_relative_path

__all__ = ["FileDigest", "SnapshotManifest", "SnapshotSource", "UpstreamFailure"]

SnapshotSource = Literal["record", "live-run", "probe", "import", "extend"]


class FileDigest(BaseModel):
    """sha256 and size of one file of a snapshot folder."""

    path: str = Field(description="Path relative to the snapshot folder.")
    sha256: str = Field(description="sha256 of the file's bytes (hex).")
    size: int = Field(description="Size in bytes.")

    @field_validator("path")
    @classmethod
    def _inside(cls, v: str) -> str:
        return check_relative_path(v)


class UpstreamFailure(BaseModel):
    """A request the recording proxy could not get an answer to from the origin (nothing archived for it)."""

    url: str = Field(description="The URL asked for (redacted as the recording redacts).")
    method: str = Field(default="GET", description="The request's method.")
    error: str = Field(description="Why, as the proxy saw it (refused, timed out, no such host ...).")
    at: datetime | None = Field(default=None, description="When it failed (UTC).")


class SnapshotManifest(FileModel):
    """``manifest.json`` of a snapshot folder ``snapshots/<task-id>/<snapshot-id>/``."""

    FORMAT_VERSION = 1

    version: int = Field(default=1, ge=1, description="Format version of the file.")
    task_id: str = Field(description="The task the snapshot was captured for.")
    snapshot_id: str = Field(description="The snapshot's id (its folder name).")
    created_at: datetime = Field(description="Capture start (UTC).")
    finished_at: datetime | None = Field(default=None, description="Capture end (UTC).")
    source: SnapshotSource = Field(default="record", description="What made it: record, live-run, probe, import or extend "
                                  "(a base snapshot merged with others; see provenance.json).")
    start_url: str | None = Field(default=None, description="Where the capture started.")
    pages: list[str] = Field(default_factory=list, description="Main-document URLs visited, in order.")
    archive: str = Field(description="Archive file name, e.g. archive.warc.zst.")
    index: str = Field(default="index.cdxj", description="CDXJ index file name.")
    records: dict[str, int] = Field(default_factory=dict, description="Record counts by WARC-Type.")
    exchanges: int = Field(default=0, description="Request/response pairs archived.")
    payload_bytes: int = Field(default=0, description="Response payload bytes archived.")
    archive_bytes: int = Field(default=0, description="Size of the archive file.")
    files: list[FileDigest] = Field(default_factory=list, description="Digests of the folder's files.")
    tools: dict[str, str] = Field(default_factory=dict, description="Versions: python, mitmproxy, chromium, ...")
    settings: dict[str, Any] = Field(default_factory=dict, description="Recording settings (format, redaction ...).")
    screenshots: list[str] = Field(default_factory=list, description="Screenshots taken while recording.")
    notes: list[str] = Field(default_factory=list, description="Anything worth knowing about the capture.")
    @field_validator("archive", "index")
    @classmethod
    def _inside(cls, v: str) -> str:  # an absolute or '..' path would read files outside the snapshot
        return check_relative_path(v)

    @field_validator("screenshots")
    @classmethod
    def _all_inside(cls, v: list[str]) -> list[str]:
        return [check_relative_path(x) for x in v]

    @field_validator("task_id", "snapshot_id")
    @classmethod
    def _ids(cls, v: str) -> str:
        return check_id("id", v)

    upstream_failures: list[UpstreamFailure] = Field(
        default_factory=list, description="Requests whose origin could not be reached while recording (at most "
        "1,000): the site as it was then, though nothing of them is in the archive.")
    truncated: list[str] = Field(default_factory=list, description="'URL (reason)' of each response archived "
                                 "cut short (WARC-Truncated: length, time, disconnect ...; at most 1,000): a "
                                 "stream the recording ended, or a limit cut.")
    shared: list[str] = Field(default_factory=list, description="Shared payload stores (suite-level "
                              "deduplication) its revisits refer to, as paths relative to the snapshot folder.")
