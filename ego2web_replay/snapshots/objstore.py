"""Snapshots on object storage: a :class:`~.storage.Storage` over any fsspec URL (``s3://`` through s3fs).

:class:`ObjectStorage` maps the five storage methods onto an fsspec file system:
``read`` with an offset is one ranged GET (``cat_file(start, end)``), ``list``
a delimiter listing, ``write_atomic`` one PUT (an object appears whole or not at
all; s3fs uploads big files in parts that become visible only when the upload
completes). ``put_file`` uploads a local file the same way without reading it
into memory.

For ``s3://`` the endpoint and credentials come from the standard AWS
variables (:data:`AWS_VARIABLES`): ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_DEFAULT_REGION`` (or ``AWS_REGION``). Every failure of the
store (unreachable endpoint, refused credentials, missing bucket) becomes a
:class:`StorageError` with one line saying which URL and what to check; a
missing object stays a ``FileNotFoundError``, as it is for a local folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from ..errors import SnapshotError

__all__ = ["ObjectStorage", "StorageError", "AWS_VARIABLES", "is_remote", "storage_options"]

T = TypeVar("T")

#: The environment variables that configure an ``s3://`` store (read on the driver, passed to Ray workers).
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION")


class StorageError(SnapshotError):
    """Object storage could not be reached or refused a request."""


def is_remote(location: str | os.PathLike[str]) -> bool:
    """True for a URL with a scheme other than ``file://`` (``s3://bucket/prefix``, ``memory://x``)."""
    text = str(location)
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme.lower() != "file"


def storage_options(url: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """fsspec options for ``url`` from the environment (only ``s3://`` takes any)."""
    env = os.environ if env is None else env
    if not url.lower().startswith(("s3://", "s3a://")):
        return {}
    client: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        client["endpoint_url"] = endpoint
    region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION")
    if region:
        client["region_name"] = region
    opts: dict[str, Any] = {
        "client_kwargs": client,
        # fail in seconds, not minutes, when the endpoint is wrong; a refused request is not retried
        "config_kwargs": {"connect_timeout": 10, "read_timeout": 60, "retries": {"max_attempts": 2}},
    }
    if env.get("AWS_ACCESS_KEY_ID"):
        opts["key"] = env["AWS_ACCESS_KEY_ID"]
        opts["secret"] = env.get("AWS_SECRET_ACCESS_KEY")
        if env.get("AWS_SESSION_TOKEN"):
            opts["token"] = env["AWS_SESSION_TOKEN"]
    return opts


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class ObjectStorage:
    """Files under a URL prefix of an fsspec file system (``s3://bucket/prefix``, ``memory://root``)."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        try:
            import fsspec
        except ImportError:
            raise StorageError(f"{url}: snapshots on object storage need fsspec (and s3fs for s3://): "
                               "pip install 'ego2web-replay[s3]'") from None
        self.url = url.rstrip("/")
        opts = storage_options(self.url) if options is None else options
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **opts)
        except ImportError as e:
            raise StorageError(f"{url}: no file system for this URL ({e}); for s3:// "
                               "pip install 'ego2web-replay[s3]'") from None
        except (ValueError, TypeError) as e:
            raise StorageError(f"{url}: not a usable storage URL ({_first_line(e)})") from None
        self.root = str(root).rstrip("/")
        #: bytes received from the store and GET requests made (a warm cache makes neither)
        self.bytes_read = 0
        self.gets = 0

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url!r})"

    def child(self, prefix: str) -> ObjectStorage:
        """The folder ``prefix`` under this one, sharing its connection."""
        sub = object.__new__(ObjectStorage)
        sub.fs, sub.url, sub.root = self.fs, f"{self.url}/{prefix.strip('/')}", self._path(prefix.strip("/"))
        sub.bytes_read, sub.gets = 0, 0
        return sub

    def _path(self, name: str) -> str:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"{name!r}: storage names are relative and stay under the root")
        return f"{self.root}/{name}" if name else self.root

    def _call(self, what: str, name: str, fn: Callable[[], T]) -> T:
        """Run one store call; every failure but a missing object becomes a one-line StorageError."""
        where = f"{self.url}/{name}" if name else self.url
        try:
            return fn()
        except FileNotFoundError:
            raise
        except PermissionError as e:
            raise StorageError(f"{where}: {what} refused ({_first_line(e)}); check AWS_ACCESS_KEY_ID "
                               "and AWS_SECRET_ACCESS_KEY") from None
        except StorageError:
            raise
        except Exception as e:  # noqa: BLE001 - botocore, aiohttp and fsspec errors have no common base
            hint = ("; check AWS_ENDPOINT_URL" if "connect" in str(e).lower() or "endpoint" in str(e).lower()
                    else "")
            raise StorageError(f"{where}: {what} failed ({_first_line(e)}){hint}") from None

    # -- the Storage protocol ------------------------------------------------------
    def open(self, name: str) -> BinaryIO:
        fh = self._call("open", name, lambda: self.fs.open(self._path(name), "rb"))
        return fh  # type: ignore[no-any-return]

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        end = None if length is None else offset + length
        data = self._call("read", name, lambda: self.fs.cat_file(self._path(name), start=offset or None, end=end))
        self.gets += 1
        self.bytes_read += len(data)
        return bytes(data)

    def exists(self, name: str) -> bool:
        self.fs.invalidate_cache(self._path(name))
        return bool(self._call("lookup", name, lambda: self.fs.isfile(self._path(name))))

    def list(self, prefix: str = "") -> list[str]:
        base = prefix.strip("/")
        try:
            found = self._call("listing", base, lambda: self.fs.ls(self._path(base), detail=True, refresh=True))
        except FileNotFoundError:
            return []
        inner = self._path(base).rstrip("/") + "/"
        names = set()
        for item in found:
            path = str(item["name"]).rstrip("/")
            if not path.startswith(inner):
                continue  # the folder itself, as some stores list it
            rel = path[len(self.root) + 1:]
            names.add(rel + "/" if item.get("type") == "directory" else rel)
        return sorted(names)

    def write_atomic(self, name: str, data: bytes) -> None:
        self._call("upload", name, lambda: self.fs.pipe_file(self._path(name), bytes(data)))

    # -- beyond the protocol ----------------------------------------------------------
    def put_file(self, name: str, local: Path) -> None:
        """Upload a local file to ``name``, all or nothing, without reading it into memory."""
        self._call("upload", name, lambda: self.fs.put_file(str(local), self._path(name)))

    def etag(self, name: str) -> str:
        """A token that changes when ``name`` is replaced (ETag, else size and time); no body is read."""
        self.fs.invalidate_cache(self._path(name))  # the connection is shared: never an ETag from an old listing
        info = self._call("lookup", name, lambda: self.fs.info(self._path(name)))
        tag = info.get("ETag") or info.get("etag")
        return str(tag) if tag else f"{info.get('size')}-{info.get('LastModified') or info.get('mtime') or ''}"

    def check_root(self, *, write: bool = False) -> None:
        """Fail with one line when the store cannot be reached, the bucket is missing, or (``write``) refuses a PUT."""
        bucket = self.root.split("/", 1)[0]
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        if "s3" in protocols:
            try:
                self._call("lookup", "", lambda: self.fs.info(bucket))
            except FileNotFoundError:
                raise StorageError(f"{self.url}: the bucket {bucket!r} does not exist (or is not visible with these "
                               "credentials); create it first") from None
        if write:
            probe = ".write-test"
            self.write_atomic(probe, b"")
            self._call("delete", probe, lambda: self.fs.rm_file(self._path(probe)))
