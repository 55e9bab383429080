"""The ``ego2web-replay`` command line.

The CLI only translates: each command parses its options, calls one library
function and prints the result. Commands live in ``ego2web_replay.commands``
(one module per command group, each exporting ``COMMANDS``); errors of the
project's own types are printed as one line and exit non-zero.

Importing this module must stay cheap (``--help`` and argument errors answer
at once): command modules import click and the light ``config``/``errors``
modules only, and import their library inside the command's function.
``-q``/``-v``/``--no-progress`` are added here to the root and to every
command, so they work before or after the command name.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from . import __version__, commands
from .commands._options import output_params
from .commands._output import configure_logging, output
from .errors import Ego2WebError, storage_error

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ego2web-replay")
def cli() -> None:
    """Record live-web agent benchmarks once, replay them frozen and hermetic,
    run agents live and frozen, judge the trajectories and track drift.

    Results go to stdout, progress and errors to stderr; `--json -` prints
    only JSON on stdout.
    """
    configure_logging(output())


def _add_output_options(command: click.Command) -> None:
    command.params.extend(output_params())
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_output_options(sub)


def _register() -> None:
    names = {p.stem for folder in commands.__path__ for p in Path(folder).glob("*.py")}
    for name in sorted(n for n in names if not n.startswith("_")):
        module = importlib.import_module(f"{commands.__name__}.{name}")
        for command in getattr(module, "COMMANDS", []):
            cli.add_command(command)
    _add_output_options(cli)


_register()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the CLI, turning project errors into one line."""
    try:
        cli.main(args=argv, prog_name="ego2web-replay", standalone_mode=False)
    except Ego2WebError as e:
        click.secho(f"error: {e}", fg="red", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except OSError as e:  # a full disk, a read-only one, a name too long: the user's to fix, in one line
        mapped = storage_error(e)
        if mapped is None:
            raise
        click.secho(f"error: {mapped}", fg="red", err=True)
        return mapped.exit_code
    except (RecursionError, MemoryError) as e:  # a limit no reader caught: still one line, never a traceback
        click.secho(f"error: an input is too large or too deeply nested to process ({type(e).__name__}); "
                    "see the reading limits in docs/limits.md", fg="red", err=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
