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

Every request has a timeout and a bounded number of tries (:func:`store_limits`:
``EGO2WEB_REPLAY_STORE_TIMEOUT`` seconds to connect and between bytes read,
default 20; ``EGO2WEB_REPLAY_STORE_ATTEMPTS`` tries, default 3, with botocore's
backoff between them; s3fs adds no retry loop of its own). A store that refuses
connections, stalls or drops them is a :class:`StoreUnreachable` naming its
endpoint, after at most about attempts × (timeout + backoff) seconds, never a
silent wait and never a "missing" object.

Every request this process makes to a store is counted (:func:`store_requests`: object GETs and the
bytes they brought, lookups of one object or bucket, listings), so an episode can say what opening and
reading its snapshot asked of the store (``replay_stats.json``'s ``store``), a warm cache nothing but
lookups.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from ..errors import SnapshotError

__all__ = ["ObjectStorage", "StorageError", "StoreUnreachable", "AWS_VARIABLES", "STORE_VARIABLES", "is_remote",
           "storage_options", "store_limits", "store_requests", "LIST_PAGE_KEYS"]

T = TypeVar("T")

#: The environment variables that configure an ``s3://`` store (read on the driver, passed to Ray workers).
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION")
#: The variables that bound every store request (see :func:`store_limits`).
STORE_VARIABLES = ("EGO2WEB_REPLAY_STORE_TIMEOUT", "EGO2WEB_REPLAY_STORE_ATTEMPTS")


_counts = {"gets": 0, "bytes": 0, "lookups": 0, "listings": 0}
_counts_lock = threading.Lock()


def _count(**add: int) -> None:
    with _counts_lock:
        for name, n in add.items():
            _counts[name] += n


def store_requests() -> dict[str, int]:
    """What this process has asked of object stores so far: ``gets`` (object bodies, whole or by range)
    and the ``bytes`` they brought, ``lookups`` (one object's or bucket's metadata: a HEAD) and
    ``listings``. An episode records the difference over its run."""
    with _counts_lock:
        return dict(_counts)


class StorageError(SnapshotError):
    """Object storage could not be reached or refused a request."""


class StoreUnreachable(StorageError):
    """The store did not answer: connection refused, timed out or dropped, on every try."""


def store_limits(env: Mapping[str, str] | None = None) -> tuple[float, int]:
    """(timeout in seconds, tries) of each store request, from ``EGO2WEB_REPLAY_STORE_TIMEOUT`` (default
    20) and ``EGO2WEB_REPLAY_STORE_ATTEMPTS`` (default 3)."""
    env = os.environ if env is None else env
    try:
        timeout = float(env.get("EGO2WEB_REPLAY_STORE_TIMEOUT") or 20)
        attempts = int(env.get("EGO2WEB_REPLAY_STORE_ATTEMPTS") or 3)
    except ValueError:
        raise StorageError("EGO2WEB_REPLAY_STORE_TIMEOUT must be seconds and EGO2WEB_REPLAY_STORE_ATTEMPTS a "
                           "whole number") from None
    if timeout <= 0 or attempts < 1:
        raise StorageError("EGO2WEB_REPLAY_STORE_TIMEOUT must be > 0 and EGO2WEB_REPLAY_STORE_ATTEMPTS >= 1")
    return timeout, attempts


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
    timeout, attempts = store_limits(env)
    opts: dict[str, Any] = {
        "client_kwargs": client,
        # every request: a connect and a read timeout, and botocore's bounded retries (standard mode retries
        # refused, dropped and timed-out connections, 5xx and throttling; a refused request is not retried)
        "config_kwargs": {"connect_timeout": min(timeout, 10.0), "read_timeout": timeout,
                          "retries": {"total_max_attempts": attempts, "mode": "standard"}},
    }
    if env.get("AWS_ACCESS_KEY_ID"):
        opts["key"] = env["AWS_ACCESS_KEY_ID"]
        opts["secret"] = env.get("AWS_SECRET_ACCESS_KEY")
        if env.get("AWS_SESSION_TOKEN"):
            opts["token"] = env["AWS_SESSION_TOKEN"]
    return opts


#: Keys a listing request of :meth:`ObjectStorage.list_tree` asks for (S3 answers at most 1,000).
LIST_PAGE_KEYS = 1000


def _tag(info: Mapping[str, Any]) -> str:
    """An object's change token from its metadata (a lookup's or a listing's): its ETag, else size and time."""
    tag = info.get("ETag") or info.get("etag")
    return str(tag) if tag else f"{info.get('size')}-{info.get('LastModified') or info.get('mtime') or ''}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


#: Exception class names (anywhere in the class's bases) that mean the store did not answer.
_UNREACHABLE = frozenset({"ConnectionError", "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                          "ConnectionClosedError", "HTTPClientError", "FSTimeoutError", "TimeoutError",
                          "ClientConnectionError", "ServerDisconnectedError"})


def _unreachable(e: BaseException) -> bool:
    """A refused, timed-out or dropped connection (botocore, aiohttp, fsspec or the OS), not a refusal."""
    return any(c.__name__ in _UNREACHABLE for c in type(e).__mro__)


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
        #: where the store is, for messages: the endpoint URL, AWS's own for s3:// without one
        self.endpoint = str((opts.get("client_kwargs") or {}).get("endpoint_url")
                            or ("AWS S3's default endpoint" if self.url.lower().startswith("s3") else self.url))
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **opts)
        except ImportError as e:
            raise StorageError(f"{url}: no file system for this URL ({e}); for s3:// "
                               "pip install 'ego2web-replay[s3]'") from None
        except (ValueError, TypeError) as e:
            raise StorageError(f"{url}: not a usable storage URL ({_first_line(e)})") from None
        self.root = str(root).rstrip("/")
        if hasattr(self.fs, "retries"):
            self.fs.retries = 1  # s3fs would try each call 5 times over botocore's tries: 5 × 3 × the timeout
        #: bytes received from the store and GET requests made (a warm cache makes neither)
        self.bytes_read = 0
        self.gets = 0

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url!r})"

    def child(self, prefix: str) -> ObjectStorage:
        """The folder ``prefix`` under this one, sharing its connection."""
        sub = object.__new__(ObjectStorage)
        sub.fs, sub.url, sub.root = self.fs, f"{self.url}/{prefix.strip('/')}", self._path(prefix.strip("/"))
        sub.endpoint = self.endpoint
        sub.bytes_read, sub.gets = 0, 0
        return sub

    def _path(self, name: str) -> str:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"{name!r}: storage names are relative and stay under the root")
        return f"{self.root}/{name}" if name else self.root

    def _deadline(self, nbytes: int = 0) -> dict[str, float]:
        """The whole call's time limit, for fsspec's async file systems (s3fs): every try's timeouts and
        backoff, plus 4 s a MiB moved (a floor of 256 KiB/s). botocore's read timeout does not cover
        every wait (a PUT to a store that accepts the connection and never answers waits on), so the
        call as a whole is cancelled when it runs past this."""
        if not getattr(self.fs, "async_impl", False):
            return {}
        timeout, attempts = store_limits()
        return {"timeout": attempts * (2 * timeout + 5) + nbytes / (256 << 10)}

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
            if _unreachable(e):
                timeout, attempts = store_limits()
                detail = _first_line(e) if str(e).strip() else f"{type(e).__name__}: no answer in time"
                tries = f"{attempts} {'try' if attempts == 1 else 'tries'}, {timeout:g} s timeout each"
                raise StoreUnreachable(f"{where}: {what} failed: the object store at {self.endpoint} is unreachable "
                                       f"({detail}; {tries}); check AWS_ENDPOINT_URL and that the store is up") from None
            hint = ("; check AWS_ENDPOINT_URL" if "connect" in str(e).lower() or "endpoint" in str(e).lower()
                    else "")
            raise StorageError(f"{where}: {what} failed ({_first_line(e)}){hint}") from None

    # -- the Storage protocol ------------------------------------------------------
    def open(self, name: str) -> BinaryIO:
        fh = self._call("open", name, lambda: self.fs.open(self._path(name), "rb"))
        _count(gets=1)  # a file the manifest does not list, streamed: counted once, its bytes not
        return fh  # type: ignore[no-any-return]

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        end = None if length is None else offset + length
        # a whole file of unknown size gets no time limit as a whole (it may be large); each of its requests
        # still has its timeouts and tries
        limit = self._deadline(length) if length is not None else {}
        data = self._call("read", name, lambda: self.fs.cat_file(self._path(name), start=offset or None, end=end,
                                                                 **limit))
        self.gets += 1
        self.bytes_read += len(data)
        _count(gets=1, bytes=len(data))
        return bytes(data)

    def exists(self, name: str) -> bool:
        self.fs.invalidate_cache(self._path(name))
        _count(lookups=1)
        try:  # not fs.isfile: it answers False for a store that cannot be reached
            info = self._call("lookup", name, lambda: self.fs.info(self._path(name), **self._deadline()))
        except FileNotFoundError:
            return False
        return info.get("type") != "directory"

    def list(self, prefix: str = "") -> list[str]:
        base = prefix.strip("/")
        _count(listings=1)
        try:
            found = self._call("listing", base, lambda: self.fs.ls(self._path(base), detail=True, refresh=True,
                                                                               **self._deadline()))
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
        self._call("upload", name, lambda: self.fs.pipe_file(self._path(name), bytes(data),
                                                                     **self._deadline(len(data))))

    # -- beyond the protocol ----------------------------------------------------------
    def put_file(self, name: str, local: Path) -> None:
        """Upload a local file to ``name``, all or nothing, without reading it into memory."""
        self._call("upload", name, lambda: self.fs.put_file(str(local), self._path(name),
                                                                    **self._deadline(local.stat().st_size)))

    def etag(self, name: str) -> str:
        """A token that changes when ``name`` is replaced (ETag, else size and time); no body is read."""
        self.fs.invalidate_cache(self._path(name))  # the connection is shared: never an ETag from an old listing
        _count(lookups=1)
        info = self._call("lookup", name, lambda: self.fs.info(self._path(name), **self._deadline()))
        return _tag(info)

    def list_tree(self, prefix: str = "", max_pages: int | None = None) -> builtins.list[tuple[str, str]] | None:
        """Every object under ``prefix`` (names relative to this folder, at any depth) with its :meth:`etag`
        token, from one listing without a delimiter: on ``s3://`` a request per :data:`LIST_PAGE_KEYS` keys,
        each counted as a listing; another file system's whole tree in one call. None when that needs more
        than ``max_pages`` requests (the ones made are counted; what they listed is dropped)."""
        base = prefix.strip("/")
        inner = self._path(base).rstrip("/") + "/"
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        found: list[tuple[str, str]] = []
        if "s3" not in protocols:
            _count(listings=1)
            try:
                tree = self._call("listing", base, lambda: self.fs.find(self._path(base), detail=True))
            except FileNotFoundError:
                return []
            for info in tree.values():
                path = str(info["name"])
                if path.startswith(inner) and info.get("type") != "directory":
                    found.append((path[len(self.root) + 1:], _tag(info)))
            return sorted(found)
        bucket, _, key = inner.partition("/")
        query: dict[str, Any] = {"Bucket": bucket, "Prefix": key, "MaxKeys": LIST_PAGE_KEYS}
        pages = 0
        while True:
            if max_pages is not None and pages >= max_pages:
                return None
            pages += 1
            _count(listings=1)
            page = self._call("listing", base, lambda: self.fs.call_s3("list_objects_v2", **query,
                                                                          **self._deadline()))
            for item in page.get("Contents", []):
                name = f"{bucket}/{item['Key']}"
                found.append((name[len(self.root) + 1:], _tag({**item, "size": item.get("Size")})))
            if not page.get("IsTruncated"):
                return sorted(found)
            query["ContinuationToken"] = page["NextContinuationToken"]

    def check_root(self, *, write: bool = False) -> None:
        """Fail with one line when the store cannot be reached, the bucket is missing, or (``write``) refuses a PUT."""
        bucket = self.root.split("/", 1)[0]
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        if "s3" in protocols:
            _count(lookups=1)
            try:
                self._call("lookup", "", lambda: self.fs.info(bucket, **self._deadline()))
            except FileNotFoundError:
                raise StorageError(f"{self.url}: the bucket {bucket!r} does not exist (or is not visible with these "
                               "credentials); create it first") from None
        if write:
            probe = ".write-test"
            self.write_atomic(probe, b"")
            self._call("delete", probe, lambda: self.fs.rm_file(self._path(probe), **self._deadline()))
