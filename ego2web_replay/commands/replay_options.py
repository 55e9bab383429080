"""The replay options, declared once: ``serve`` and ``run`` (frozen mode) take exactly these.

:func:`replay_options` adds them to a command and hands the command one
``replay`` argument, a validated :class:`~ego2web_replay.models.ReplayConfig`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import Ego2WebError
from ._options import Finite

__all__ = ["replay_options", "parse_share_window", "DEFAULT_SHARE_WINDOW"]

DEFAULT_SHARE_WINDOW = "24h"


def parse_share_window(text: str) -> float:
    """``--share-window`` in seconds (``90s``, ``30m``, ``24h``, ``2d``, or seconds); one clear line otherwise."""
    from ..errors import ReplayError
    from ..snapshots.extend import parse_window

    try:
        seconds = parse_window(str(text)).total_seconds()
    except Ego2WebError:
        seconds = -1.0
    if seconds <= 0:
        raise ReplayError(f"invalid --share-window {text!r}: give a positive length of time such as 30m, 24h or "
                          "2d (--no-share turns sharing off)")
    return seconds

_OPTIONS = [
    click.option("--rules", "replay_rules", multiple=True,
                 type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="Replay: extra matching rules (YAML, same format as the bundled rules.yaml); repeatable."),
    click.option("--sequence", "replay_sequence", type=click.Choice(["sequence", "first", "last"]),
                 default="sequence", show_default=True,
                 help="Replay: repeated captures of one request: in recorded order then the last, "
                      "always the first, or always the last."),
    click.option("--no-freeze", "replay_no_freeze", is_flag=True,
                 help="Replay: do not inject the clock/random freezing script into HTML."),
    click.option("--miss", "replay_miss", default="404", show_default=True,
                 help="Replay: answer a request that is not in the snapshots with this HTTP status, or 'live' "
                      "(forward to the live web; for diagnosis only, flagged in the stats)."),
    click.option("--fuzzy", "replay_fuzzy", is_flag=True,
                 help="Replay, diagnosis only: answer a request that would miss with the nearest capture of the "
                      "same path (another page's content), counted apart as 'fuzzy'. See docs/matching.md."),
    click.option("--fuzzy-threshold", "replay_fuzzy_threshold", type=Finite(0, 1), default=None,
                 help="Replay: least similarity for --fuzzy (default: the rules', 0.5)."),
    click.option("--share-window", "replay_share_window", default=DEFAULT_SHARE_WINDOW, show_default=True,
                 metavar="DURATION",
                 help="Replay: answer a request the task's snapshot lacks from the latest snapshot of every other "
                      "task under the same snapshots root recorded within this time of it (90s, 30m, 24h, 2d); "
                      "such answers are logged and counted as 'shared' (recorded responses: they keep the episode complete). "
                      "See docs/matching.md."),
    click.option("--no-share", "replay_no_share", is_flag=True,
                 help="Replay: answer only from the task's own snapshot (no shared captures)."),
    click.option("--engine", "replay_engine", type=click.Choice(["fast", "mitmproxy"]), default=None,
                 help="Replay: what carries the requests: the fast asyncio front end (default), or mitmproxy "
                      "(chosen by --miss live). Both serve the same bytes and stats."),
]


def replay_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the replay options to a click command; it receives ``replay: ReplayConfig``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..models import ReplayConfig

        engine = kwargs.pop("replay_engine")
        window, no_share = kwargs.pop("replay_share_window"), kwargs.pop("replay_no_share")
        kwargs["replay"] = ReplayConfig.make(
            rules_files=kwargs.pop("replay_rules"), sequence=kwargs.pop("replay_sequence"),
            freeze=not kwargs.pop("replay_no_freeze"), miss=kwargs.pop("replay_miss"),
            fuzzy=kwargs.pop("replay_fuzzy"), fuzzy_threshold=kwargs.pop("replay_fuzzy_threshold"),
            share_window_s=None if no_share else parse_share_window(window),
            **({"engine": engine} if engine else {}))
        return command(*args, **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper
