"""``--executor local|ray`` and the Ray options, shared by the commands that run episodes or judge them.

The decorated command receives ``executor``: an :class:`ExecutorChoice`, turned
into an executor by :meth:`ExecutorChoice.make` once the workers are known.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from ._options import Finite

__all__ = ["ExecutorChoice", "executor_options"]


@dataclass(frozen=True)
class ExecutorChoice:
    kind: str = "local"
    address: str | None = None
    cpus: float = 1.0
    memory_mb: int | None = None
    retries: int = 2

    def make(self, on_info: Callable[[str], None] | None = None) -> Any:
        """None for the local default (chosen by the runner from ``--workers``), else a Ray executor."""
        if self.kind == "local":
            return None
        from ..runner.ray_executor import RayExecutor, RaySettings, _import_ray

        _import_ray()  # a missing extra is a one-line error before any work
        return RayExecutor(RaySettings(address=self.address, num_cpus=self.cpus, memory_mb=self.memory_mb,
                                       max_retries=self.retries), on_info=on_info)

    def make_judge_executor(self) -> Any:
        """None for the local judge (threads), else each verdict a Ray task (``judge --executor ray``)."""
        if self.kind == "local":
            return None
        from ..judge.ray_judge import RayJudge
        from ..raycluster import import_ray

        import_ray()
        return RayJudge(address=self.address, num_cpus=self.cpus, memory_mb=self.memory_mb,
                        max_retries=self.retries)


def executor_options[F: Callable[..., Any]](f: F) -> F:
    @click.option("--executor", "executor_kind", type=click.Choice(["local", "ray"]), default="local",
                  show_default=True,
                  help="local: --workers processes on this machine; ray: each episode a task on a Ray "
                       "cluster (pip install 'ego2web-replay[ray]').")
    @click.option("--ray-address", default=None, metavar="ADDR",
                  help="Ray cluster to use (host:port or ray://...; default $RAY_ADDRESS, else a "
                       "cluster started on this machine for the run).")
    @click.option("--ray-cpus", type=Finite(0.1), default=1.0, show_default=True,
                  help="CPUs each episode asks of the Ray cluster.")
    @click.option("--ray-memory", "ray_memory_mb", type=click.IntRange(1), default=None, metavar="MB",
                  help="Memory each episode asks of the Ray cluster, in MB.")
    @click.option("--ray-retries", type=click.IntRange(0, 10), default=2, show_default=True,
                  help="Retries of an episode whose Ray worker died; then it is recorded as infra_error.")
    @functools.wraps(f)
    def wrapper(*args: Any, executor_kind: str, ray_address: str | None, ray_cpus: float,
                ray_memory_mb: int | None, ray_retries: int, **kwargs: Any) -> Any:
        if executor_kind == "local" and ray_address:
            raise click.UsageError("--ray-address needs --executor ray")
        kwargs["executor"] = ExecutorChoice(executor_kind, ray_address, ray_cpus, ray_memory_mb, ray_retries)
        return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
