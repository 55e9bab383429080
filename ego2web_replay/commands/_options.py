"""Options shared by several commands, defined once so each concept has one name and one help text.

Each is a decorator (``@db_options``) or a function returning one
(``@json_option("the comparison")``). The output options (``-q``, ``-v``,
``--no-progress``) are added to the root group and to every command by
``ego2web_replay.cli``; commands read them through :func:`._output.output`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..config import DEFAULT_DB, DEFAULT_SNAPSHOTS
from ._output import Output, configure_logging, output

__all__ = ["LOCATION", "Finite", "compression_option", "db_option", "db_options", "guard_option", "iterations_option", "json_option",
           "keep_credentials_option", "output_params",
           "snapshots_option", "upstream_ca_option"]

F = TypeVar("F", bound=Callable[..., Any])
GUARDS = ("open", "allowlist", "loopback")


class Finite(click.FloatRange):
    """A :class:`click.FloatRange` that is also finite: ``nan`` and ``inf`` are usage errors, not tracebacks
    (``nan`` passes every range check, and neither makes a timedelta or a timeout)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def db_option[C: Callable[..., Any]](f: C) -> C:
    """``--db``: the tracking DuckDB file (read by ``ingest``, ``compare``, ``report``, ``drift``)."""
    return click.option("--db", "db_path", type=click.Path(path_type=Path), default=DEFAULT_DB,
                        show_default=True, help="The tracking DuckDB file.")(f)


def db_options(what: str) -> Callable[[F], F]:
    """``--db PATH`` / ``--no-db`` for commands that record ``what`` in the tracking database as they go.

    The function receives ``db``: the path, or ``None`` with ``--no-db``.
    """

    def drop_when_no_db(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.meta["ego2web_replay.no_db"] = True
        return value

    def decorate(f: F) -> F:
        f = click.option("--no-db", is_flag=True, expose_value=False, callback=drop_when_no_db, is_eager=True,
                         help="Do not write to the tracking database.")(f)
        return click.option("--db", "db", type=click.Path(path_type=Path), default=DEFAULT_DB, show_default=True,
                            callback=lambda ctx, _p, v: None if ctx.meta.get("ego2web_replay.no_db") else v,
                            help=f"Record {what} in this tracking database.")(f)

    return decorate


class LocationType(click.ParamType):
    """A snapshots folder, or an object-storage URL (``s3://bucket/prefix``): a ``Path`` or a ``str``."""

    name = "FOLDER|URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path | str:
        from ..snapshots.location import as_location

        if isinstance(value, Path):
            return value
        if not str(value).strip():
            self.fail("give a folder or a URL", param, ctx)
        return as_location(str(value))


LOCATION = LocationType()


def snapshots_option(help: str = "Snapshots root folder (<root>/<task-id>/<snapshot-id>/).",
                     name: str = "snapshots_root") -> Callable[[F], F]:
    """``--snapshots``: the snapshots root, a folder or an object-storage URL (``s3://bucket/prefix``)."""
    return click.option("--snapshots", name, type=LOCATION, default=DEFAULT_SNAPSHOTS, show_default=True,
                        help=help + " A folder, or an fsspec URL such as s3://bucket/prefix (endpoint and "
                                    "credentials from the AWS_* variables).")


def json_option(what: str, *, default: str | None = None, alias: str | None = None) -> Callable[[F], F]:
    """``--json [FILE|-]``: ``what`` as JSON; bare ``--json`` or ``--json -`` prints it, alone, on stdout.

    The function receives ``json_out``: ``None``, ``"-"`` or a file path (a string). ``default``
    describes where the command writes it without ``--json``; ``alias`` adds an old name for
    ``--json FILE``, hidden from help and warned about when used.
    """
    where = f" (default: {default})" if default else ""

    def decorate(f: F) -> F:
        if alias:
            f = click.option(alias, "json_out", hidden=True, deprecated="use --json FILE")(f)
        return click.option("--json", "json_out", is_flag=False, flag_value="-", default=None, metavar="[FILE|-]",
                            help=f"Write {what} as JSON to FILE{where}; `--json` or `--json -` prints only "
                                 "the JSON, on stdout.")(f)

    return decorate


def iterations_option(default: int, *, minimum: int = 1, alias: str | None = None) -> Callable[[F], F]:
    """``--iterations N``: bootstrap resamples for confidence intervals (``alias``: an old, hidden name)."""

    def decorate(f: F) -> F:
        if alias:
            f = click.option(alias, "iterations", type=click.IntRange(minimum), hidden=True,
                             deprecated="use --iterations")(f)
        none = " (0: none)" if minimum == 0 else ""
        return click.option("--iterations", "iterations", type=click.IntRange(minimum), default=default,
                            show_default=True, help=f"Bootstrap resamples for the confidence intervals{none}.")(f)

    return decorate


def compression_option(choices: tuple[str, ...], *, alias: str | None = None) -> Callable[[F], F]:
    """``--compression``: the archive compression (first choice is the default).

    ``alias`` adds an old name for it, hidden from help and warned about when used.
    """

    def decorate(f: F) -> F:
        if alias:
            f = click.option(alias, "compression", type=click.Choice(choices), hidden=True,
                             deprecated="use --compression")(f)
        return click.option("--compression", "compression", type=click.Choice(choices), default=choices[0],
                            show_default=True, help="Compression of the snapshot's archive: one zstd frame or "
                                                    "one gzip member per record.")(f)

    return decorate


def guard_option(help: str = "Which upstream hosts may be contacted.") -> Callable[[F], F]:
    """``--guard open|allowlist|loopback``."""
    return click.option("--guard", type=click.Choice(GUARDS), default="open", show_default=True, help=help)


def upstream_ca_option(help: str = "Also trust this CA (PEM) for upstream HTTPS.") -> Callable[[F], F]:
    """``--upstream-ca PEM``."""
    return click.option("--upstream-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=help)


def keep_credentials_option[C: Callable[..., Any]](f: C) -> C:
    """``--keep-credentials``: keep credentials in what is written instead of redacting them (``record``, ``run``)."""
    return click.option("--keep-credentials", is_flag=True,
                        help="Keep credentials (cookies, credential headers, tokens in URLs and bodies, URL "
                             "userinfo) in archives and trajectories instead of redacting them.")(f)


def _set_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _apply(ctx, lambda s: setattr(s, "verbosity", -1))


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if value:
        _apply(ctx, lambda s: setattr(s, "verbosity", max(s.verbosity, 0) + value))


def _set_no_progress(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _apply(ctx, lambda s: setattr(s, "show_progress", False))


def _apply(ctx: click.Context, change: Callable[[Output], None]) -> None:
    state = output(ctx)
    change(state)
    configure_logging(state)


def output_params() -> list[click.Option]:
    """Fresh ``-q``/``-v``/``--no-progress`` options (one set per command they are added to)."""
    return [
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_set_quiet,
                     help="Print only results and errors: no progress bar, no per-item lines."),
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_set_verbose,
                     help="Log more on stderr (-vv: debug)."),
        click.Option(["--no-progress"], is_flag=True, expose_value=False, callback=_set_no_progress,
                     help="Do not draw a progress bar (per-item lines still go to stderr)."),
    ]
