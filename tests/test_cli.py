"""Every CLI command has help text and --help works; --version prints the version."""

from __future__ import annotations

import click
from click.testing import CliRunner

from ego2web_replay import __version__
from ego2web_replay.cli import cli


def _walk(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    if isinstance(group, click.Group):
        for name, sub in group.commands.items():
            yield from _walk(sub, path + (name,))


def test_every_command_has_help():
    runner = CliRunner()
    for path, command in _walk(cli):
        assert (command.help or "").strip(), f"command {' '.join(path) or '(root)'} has no help text"
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output
