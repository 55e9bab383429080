"""Where the project keeps its files.

The data folder holds the project CA (key mode 0600) and caches. It is
``$EGO2WEB_REPLAY_HOME`` when set, else ``$XDG_DATA_HOME/ego2web-replay``,
else ``~/.local/share/ego2web-replay``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import Ego2WebError

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
    check_private_dir(path)
    return path


def check_private_dir(path: Path) -> None:
    """The data folder holds the CA key and pickled caches: nobody else may write to it.

    A folder writable by group or others is fixed (made 0700) when it is ours alone, refused when it
    belongs to someone else or is a shared sticky folder such as /tmp.
    """
    try:
        st = path.stat()
    except OSError as e:
        raise Ego2WebError(f"cannot use the data folder {path} ({e.strerror or e})") from None
    if not st.st_mode & 0o022:
        return
    if st.st_uid != os.getuid() or st.st_mode & 0o1000:  # someone else's, or a shared one like /tmp
        raise Ego2WebError(f"the data folder {path} is writable by other users and not yours alone; "
                           "use a folder of its own as EGO2WEB_REPLAY_HOME, writable by its owner only")
    try:
        os.chmod(path, 0o700)
    except OSError as e:
        raise Ego2WebError(f"the data folder {path} is writable by other users and cannot be fixed "
                           f"({e.strerror or e}); run chmod 700 on it") from None
