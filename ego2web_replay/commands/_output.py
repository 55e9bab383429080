"""Where the CLI's output goes, and how it looks when piped.

One convention for every command:

- **stdout** carries the command's result: its tables, its summary line, or,
  with ``--json -``, nothing but the JSON document.
- **stderr** carries progress: the progress bar, one line per finished item
  (task, episode), warnings and errors. ``--no-progress`` drops the bar and
  ``-q`` drops the per-item lines too; ``-v``/``-vv`` raise the log level.
- When a stream is not a terminal, lines are never wrapped and tables are
  never squeezed: a piped line is the line a program wrote, whatever the
  length of the paths in it. The bar is drawn only on an interactive
  terminal; in a log it would be noise.

The settings live in the click context (``ctx.meta``), so one process can run
many invocations (the tests do) without one leaking into the next. Rich is
imported only when a console is actually made.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text

__all__ = ["Output", "bar_wanted", "console", "emit_json", "emit_machine", "is_stdout", "line", "output", "progress", "say",
           "table", "warn", "STDOUT"]

#: The value of a file option that means "write to stdout".
STDOUT = "-"
#: Width of a console that is not a terminal: wide enough that no table cell or
#: line is ever folded, small enough that rich never pads lines to it.
_PIPE_WIDTH = 100_000
_META_KEY = "ego2web_replay.output"
_LOGGER = "ego2web_replay"


class Output:
    """The output settings of one invocation (global and per-command ``-q``/``-v``/``--no-progress``)."""

    __slots__ = ("show_progress", "verbosity")

    def __init__(self) -> None:
        #: -1 with ``-q``, 0 by default, 1 with ``-v``, 2 with ``-vv``.
        self.verbosity = 0
        #: False with ``--no-progress`` or ``-q``.
        self.show_progress = True

    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    @property
    def progress(self) -> bool:
        """Whether to draw a progress bar."""
        return self.show_progress and not self.quiet


def output(ctx: click.Context | None = None) -> Output:
    """The current invocation's settings (defaults outside a click command)."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is None:
        return Output()
    state = ctx.meta.get(_META_KEY)
    if state is None:
        state = ctx.meta[_META_KEY] = Output()
    return state


def configure_logging(state: Output) -> None:
    """Set the project logger's level from ``-q``/``-v``; verbose output goes to stderr.

    Without ``-q``/``-v`` logging is left as the libraries set it up.
    """
    import logging

    logger = logging.getLogger(_LOGGER)
    for h in [h for h in logger.handlers if getattr(h, "_ego2web_cli", False)]:
        logger.removeHandler(h)
    if state.verbosity == 0:
        logger.setLevel(logging.NOTSET)
        return
    level = {-1: logging.ERROR, 1: logging.INFO}.get(state.verbosity, logging.DEBUG)
    logger.setLevel(level)
    if state.verbosity > 0:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._ego2web_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


def console(*, stderr: bool = False, min_width: int | None = None) -> Console:
    """A rich console for stdout (or stderr) that never wraps when the stream is not a terminal.

    On a terminal it uses the terminal's width, or ``min_width`` when that is
    larger (wide tables then overflow rather than fold).
    """
    from rich.console import Console

    if not _isatty(sys.stderr if stderr else sys.stdout):  # the stream itself, whatever FORCE_COLOR says
        return Console(stderr=stderr, width=_PIPE_WIDTH, soft_wrap=True)
    probe = Console(stderr=stderr)
    if min_width and probe.width < min_width:
        return Console(stderr=stderr, width=min_width)
    return probe


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def table(*headers: str, whole: int = 1, **kwargs: Any) -> Table:
    """A rich table whose first ``whole`` columns (ids, names) are never wrapped, and whose string
    cells are literal text (an answer or URL holding ``[x]`` is shown as it is, not read as markup)."""
    from rich.table import Table
    from rich.text import Text

    class LiteralTable(Table):
        def add_row(self, *cells: Any, **kw: Any) -> None:
            super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kw)

    t = LiteralTable(**kwargs)
    for i, header in enumerate(headers):
        t.add_column(header, no_wrap=i < whole)
    return t


def line(message: str, *, status: str = "", style: str = "") -> Text:
    """One output line: ``status`` (padded by the caller) in ``style``, then ``message`` as literal text
    (without a status, ``style`` applies to the message)."""
    from rich.text import Text

    if not status:
        return Text(message, style=style)
    return Text.assemble((status, style), " ", message)


def progress(label: str) -> Progress:
    """A progress bar on stderr (``label`` then the current item), drawn on an interactive terminal
    unless ``--no-progress``/``-q``.

    Print per-item lines with :func:`say` on ``bar.console`` so they appear above the bar.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = console(stderr=True)
    return Progress(TextColumn(f"{label} {{task.description}}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, disable=not (output().progress and err.is_interactive))


def bar_wanted() -> bool:
    """Whether a progress bar drawn by a library function (``progress=``) should show: the same rule as
    :func:`progress` (an interactive stderr, no ``--no-progress``/``-q``)."""
    return output().progress and console(stderr=True).is_interactive


def say(target: Any, message: str, *, status: str = "", style: str = "") -> None:
    """Print a per-item progress line (see :func:`line`) on ``target`` (a console or progress bar) unless ``-q``."""
    if output().quiet:
        return
    getattr(target, "console", target).print(line(message, status=status, style=style), highlight=False)


def warn(target: Any, message: str) -> None:
    """Print ``warning: message`` on ``target`` (a console or progress bar), even with ``-q``."""
    getattr(target, "console", target).print(line(message, status="warning:", style="yellow"), highlight=False)


def is_stdout(dest: str | Path | None) -> bool:
    """Whether a file option's value means stdout (``-``)."""
    return dest is not None and str(dest) == STDOUT


def emit_json(dest: str | Path | None, document: Any) -> None:
    """``--json``: ``document`` (plain JSON data) to ``dest`` as :func:`emit_machine` writes it; nothing for None."""
    if dest is None:
        return
    import json

    emit_machine(dest, json.dumps(document, indent=2, default=str) + "\n")


def emit_machine(dest: str | Path, text: str) -> None:
    """Write machine output (JSON, CSV) to ``dest``: stdout for ``-``, else a file written atomically.

    A file gets a ``wrote FILE`` note on stderr, so stdout can hold another document meanwhile.
    """
    if is_stdout(dest):
        click.echo(text, nl=not text.endswith("\n"))
        return
    from ..atomic import atomic_write_text
    from ..errors import Ego2WebError

    try:
        atomic_write_text(Path(dest), text)
    except OSError as e:
        raise Ego2WebError(f"cannot write {dest} ({e.strerror or e}); choose another path, or - for stdout") from None
    click.echo(f"wrote {dest}", err=True)
