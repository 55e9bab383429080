"""Where the project keeps its files.

The data folder holds the project CA (key mode 0600) and caches. It is
``$EGO2WEB_REPLAY_HOME`` when set, else ``$XDG_DATA_HOME/ego2web-replay``,
else ``~/.local/share/ego2web-replay``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "DEFAULT_SNAPSHOTS", "DEFAULT_RUNS", "DEFAULT_DB"]

DEFAULT_SNAPSHOTS = Path("snapshots")
DEFAULT_RUNS = Path("runs")
#: The tracking database; ``$EGO2WEB_REPLAY_DB`` overrides the default in the working folder.
DEFAULT_DB = Path(os.environ.get("EGO2WEB_REPLAY_DB") or "ego2web.duckdb")


def data_dir() -> Path:
    """Return the project's data folder, creating it (mode 0700) if needed."""
    env = os.environ.get("EGO2WEB_REPLAY_HOME")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        path = Path(base) / "ego2web-replay"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
