"""Connecting to a Ray cluster, for the stages that run their work as Ray tasks (``run``, ``judge``).

Ray is an optional extra; :func:`import_ray` turns its absence into one line.
:func:`connected` joins the cluster at an address (``None``: ``$RAY_ADDRESS``,
else a one-machine cluster started for the command) unless this process is
already connected, and leaves it again afterwards. :func:`driver_env` picks the
variables a task needs to act as the driver would (object-storage and judge
endpoint settings), which travel with each task rather than being expected on
the nodes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import Ego2WebError

__all__ = ["import_ray", "connected", "driver_env", "DRIVER_VARIABLES", "swap_env"]

#: What a task inherits from the driver's environment: object storage (``s3://`` snapshots, and the limits
#: of each store request) and the OpenAI-compatible judge endpoint.
DRIVER_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                    "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                    "EGO2WEB_JUDGE_MODEL", "EGO2WEB_REPLAY_STORE_TIMEOUT", "EGO2WEB_REPLAY_STORE_ATTEMPTS")


def import_ray(what: str = "--executor ray") -> Any:
    try:
        import ray
    except ImportError:
        raise Ego2WebError(f"{what} needs Ray: pip install 'ego2web-replay[ray]'") from None
    return ray


@contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """The ``ray`` module, connected to the cluster for the duration of the block."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False,
                     runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise Ego2WebError(f"cannot connect to the Ray cluster at {address or 'this machine'}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def driver_env() -> dict[str, str]:
    """The driver's :data:`DRIVER_VARIABLES` that are set."""
    return {name: os.environ[name] for name in DRIVER_VARIABLES if os.environ.get(name)}


@contextmanager
def swap_env(values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` in this (worker) process's environment for the block, then put back what was there."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
