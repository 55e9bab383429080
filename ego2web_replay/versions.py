"""The versions of the tools that shape a result, for snapshot manifests and run manifests."""

from __future__ import annotations

import platform
from importlib import metadata

from . import __version__

__all__ = ["tool_versions"]

_PACKAGES = ("warcio", "zstandard", "mitmproxy", "playwright")


def tool_versions(extra: dict[str, str] | None = None) -> dict[str, str]:
    """``python``, ``ego2web-replay`` and the installed versions of warcio, zstandard,
    mitmproxy and playwright (``unknown`` when missing); ``extra`` entries (e.g. the
    browser's ``chromium`` version, from whoever drives it) are added last."""
    tools = {"ego2web-replay": __version__, "python": platform.python_version()}
    for dist in _PACKAGES:
        try:
            tools[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            tools[dist] = "unknown"
    tools.update(extra or {})
    return tools
