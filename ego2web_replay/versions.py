"""The versions of the tools that shape a result, for snapshot manifests and run manifests."""

from __future__ import annotations

import platform
from importlib import metadata

from . import __version__

__all__ = ["tool_versions"]

_PACKAGES = ("warcio", "zstandard", "mitmproxy", "playwright")


def tool_versions(extra: dict[str, str] | None = None, *, browser: bool = False) -> dict[str, str]:
    """``python``, ``ego2web-replay`` and the installed versions of warcio, zstandard,
    mitmproxy and playwright (``unknown`` when missing); with ``browser``, Chromium's
    version too (it starts the binary once). ``extra`` entries are added last."""
    tools = {"ego2web-replay": __version__, "python": platform.python_version()}
    for dist in _PACKAGES:
        try:
            tools[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            tools[dist] = "unknown"
    if browser:
        from .browser import chromium_version

        tools["chromium"] = chromium_version()
    tools.update(extra or {})
    return tools
