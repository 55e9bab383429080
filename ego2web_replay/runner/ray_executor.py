"""Episodes as Ray tasks: the :class:`~.executor.Executor` for a cluster (``run --executor ray``).

Each episode job becomes one Ray task that asks for ``num_cpus`` CPUs and
``memory_mb`` of memory (one proxy and one Chromium each). Workers share no
folder with the driver:

* the project CA travels with the job from the driver (through the object
  store) and is written on the worker into the ``ca/`` folder (0700, its files
  0600) of that worker process's data folder, and removed when the episode ends;
* the worker runs the episode into a private scratch folder, packs the
  finished episode folder into a tar and returns it with the summary; the
  driver unpacks it into the run folder (``<mode>.partial`` then renamed, as
  a local run does), so the run folder and the database are written by the
  driver only and look exactly like a local run's;
* snapshots are read through the storage interface: a ``--snapshots`` URL
  (``s3://...``) is opened by each worker with the driver's AWS variables
  (they travel with the job, like the CA), so no shared folder is needed;
* Chromium is looked for on the worker first; a node without it fails the
  episode with an error naming the node;
* a worker process keeps, across the episodes it runs, a warm worker
  (:mod:`.warm`: one Chromium, one replay front, the snapshots it opened, a
  fresh browser context per episode) and one data folder (0700;
  :func:`worker_home`) whose caches (``object-cache/``, content-addressed and
  checked against each manifest's sha256, ``index-cache/``,
  ``remote-snapshots/``) every episode it runs uses, so a snapshot on object
  storage is downloaded once per worker and opened once per worker, not once
  per episode; between episodes it holds no key (the episode's ``ca/``,
  scratch run folder and upstream CA are removed when it ends). The data folder
  is removed when the worker process ends.

A worker that dies (its process killed, its node lost) is retried by Ray up to
``max_retries`` times; after that the episode is recorded as an
``infra_error``: never the agent's failure, and ``--resume`` runs it again.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import socket
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import Ego2WebError
from ..models import load_trajectory, save_model
from ..raycluster import connected, driver_env, import_ray, swap_env
from .episode import EpisodeRequest, EpisodeSummary, run_episode
from .executor import infra_failure, log_start

__all__ = ["RayExecutor", "RaySettings", "infra_failure", "ray_available"]

_CA_FILES = ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem", "mitmproxy-dhparam.pem")
_EPISODE_ONLY = ("ca", "episode", "upstream-ca.pem")  # what one episode puts in the worker's data folder
_worker_home: Path | None = None


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _import_ray() -> Any:
    return import_ray()


@dataclass(frozen=True)
class RaySettings:
    """Where the cluster is and what each episode asks of it."""

    address: str | None = None  # None: $RAY_ADDRESS, else a cluster started for this run on this machine
    num_cpus: float = 1.0
    memory_mb: int | None = None
    max_retries: int = 2


# ---------------------------------------------------------------- worker side

def worker_home() -> Path:
    """This worker process's data folder (0700): the same for every episode it runs, so its caches and
    the snapshots its warm worker opened stay valid; made on first use, removed when the process ends."""
    global _worker_home
    if _worker_home is None or not _worker_home.is_dir():
        _worker_home = Path(tempfile.mkdtemp(prefix="ego2web-ray-home-"))
        atexit.register(shutil.rmtree, _worker_home, ignore_errors=True)
    return _worker_home


def _clear_episode(home: Path) -> None:
    """Remove what one episode put in the worker's data folder: the CA (its key), the scratch run folder,
    the upstream CA. The caches stay."""
    for name in _EPISODE_ONLY:
        path = home / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _private_home(ca_files: dict[str, bytes]) -> Path:
    """The worker's data folder (:func:`worker_home`) for one episode, holding the driver's CA in ``ca/``
    (0700, files 0600); :func:`_clear_episode` takes it out again."""
    home = worker_home()
    _clear_episode(home)  # what an episode stopped half-way left
    ca_dir = home / "ca"
    ca_dir.mkdir(mode=0o700)
    for name, data in ca_files.items():
        fd = os.open(ca_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return home


def _node_name() -> str:
    try:
        import ray

        ip = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - the host name alone still names the node
        ip = "?"
    return f"{socket.gethostname()} ({ip})"


def _pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def remote_episode(job: EpisodeRequest, ca_files: dict[str, bytes], upstream_ca: bytes | None,
                   storage_env: dict[str, str] | None = None) -> tuple[EpisodeSummary, bytes, str]:
    """Run one episode on a worker; returns its summary, its folder as a tar, and the scratch run folder.

    ``storage_env``: the driver's variables (:func:`~ego2web_replay.raycluster.driver_env`), so a worker
    reads ``s3://`` snapshots as the driver would.
    """
    from ..browser import chromium_executable
    from ..errors import BrowserError

    node = _node_name()
    try:
        chromium_executable()
    except BrowserError as e:
        raise Ego2WebError(f"node {node}: {e}") from None
    home = _private_home(ca_files)
    env = {"EGO2WEB_REPLAY_HOME": str(home), **(storage_env or {})}
    try:
        with swap_env(env):
            return _run_remote(job, home, upstream_ca)
    finally:
        _clear_episode(home)  # the CA's key stays on the worker only while it works; the caches stay


def _run_remote(job: EpisodeRequest, home: Path, upstream_ca: bytes | None) -> tuple[EpisodeSummary, bytes, str]:
    scratch = home / "episode"
    ca_path = None
    if upstream_ca is not None:
        ca_path = home / "upstream-ca.pem"
        with os.fdopen(os.open(ca_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
            fh.write(upstream_ca)
    from .warm import process_worker

    summary = run_episode(replace(job, run_dir=scratch / "run", upstream_ca=ca_path), process_worker())
    return summary, _pack(summary.path), str(scratch / "run")


# ---------------------------------------------------------------- driver side


def _unpack(job: EpisodeRequest, summary: EpisodeSummary, data: bytes, remote_run: str) -> EpisodeSummary:
    """Write a worker's episode into the run folder as a local run would, and point the summary at it."""
    final = job.folder
    partial = final.with_name(final.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(partial, filter="data")
    traj_file = partial / "trajectory.json"
    if traj_file.exists():
        traj = load_trajectory(traj_file)
        if traj.snapshot_path and traj.snapshot_path.startswith(remote_run):  # a live episode's own archive
            traj.snapshot_path = str(job.run_dir) + traj.snapshot_path[len(remote_run):]
            save_model(traj_file, traj)
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return replace(summary, path=final)


class RayExecutor:
    """Each episode a Ray task on the cluster at ``settings.address``; results are written by the driver."""

    def __init__(self, settings: RaySettings | None = None, *, on_info: Callable[[str], None] | None = None) -> None:
        self.settings = settings or RaySettings()
        self.on_info = on_info

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]:
        if not jobs:
            return
        from ..proxy import project_ca

        s = self.settings
        with connected(s.address) as ray:
            if self.on_info:
                nodes = [n for n in ray.nodes() if n.get("Alive")]
                cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)
                self.on_info(f"ray: {len(nodes)} node(s), {cpus:g} CPUs; {len(jobs)} episode(s) of "
                             f"{s.num_cpus:g} CPU each")
            yield from self._run(ray, jobs, project_ca())

    def _run(self, ray: Any, jobs: Sequence[EpisodeRequest], ca: Any) -> Iterator[EpisodeSummary]:
        s = self.settings
        ca_files = {name: (ca.confdir / name).read_bytes() for name in _CA_FILES if (ca.confdir / name).exists()}
        ca_ref = ray.put(ca_files)
        storage_env = driver_env()
        options: dict[str, Any] = {"num_cpus": s.num_cpus, "max_retries": s.max_retries,
                                   "retry_exceptions": False, "scheduling_strategy": "SPREAD"}
        if s.memory_mb:
            options["memory"] = s.memory_mb * 1024 * 1024
        task = ray.remote(remote_episode).options(**options)
        pending: dict[Any, EpisodeRequest] = {}
        for job in jobs:
            upstream = Path(job.upstream_ca).read_bytes() if job.upstream_ca else None
            log_start(job)
            pending[task.remote(job, ca_ref, upstream, storage_env)] = job
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    job = pending.pop(ref)
                    yield self._collect(ray, ref, job)
        finally:  # interrupted or abandoned: start nothing more
            for ref in pending:
                ray.cancel(ref, force=True)

    def _collect(self, ray: Any, ref: Any, job: EpisodeRequest) -> EpisodeSummary:
        try:
            summary, data, remote_run = ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # raised by our code on the worker (no Chromium, a full disk)
            cause = e.cause if getattr(e, "cause", None) is not None else e
            text = str(cause).strip().splitlines()
            return infra_failure(job, text[-1] if text else type(cause).__name__)
        except ray.exceptions.RayError as e:  # the worker or its node died, retries spent
            first = str(e).strip().splitlines()
            return infra_failure(job, f"worker lost ({self.settings.max_retries} retries spent): "
                                      f"{type(e).__name__}: {first[0] if first else ''}")
        return _unpack(job, summary, data, remote_run)
