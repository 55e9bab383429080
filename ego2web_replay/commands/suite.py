"""``ego2web-replay suite``: pack a suite's snapshots for distribution, unpack and check them, deduplicate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ._hooks import wire_index_hooks
from ._options import LOCATION, json_option, snapshots_option
from ._output import emit_machine, is_stdout

__all__ = ["COMMANDS", "suite"]

_TASKS = click.option("--tasks", "tasks_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
                      help="The suite's task file: take each of its tasks' latest snapshot (and ship the file).")


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _machine(json_out: str | None, data: dict[str, object]) -> bool:
    """Emit ``data`` for ``--json``; True when stdout holds only the JSON."""
    if not json_out:
        return False
    emit_machine(json_out, json.dumps(data, indent=2, default=str) + "\n")
    return is_stdout(json_out)


@click.group()
def suite() -> None:
    """Ship a suite's snapshots: deduplicated packs, checked on arrival."""


@suite.command("pack")
@click.argument("snapshots", type=LOCATION)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Pack file to write.")
@_TASKS
@click.option("--dictionary/--no-dictionary", default=True, show_default=True,
              help="Compress with a zstd dictionary trained on the suite (IIPC warc-zstd layout).")
@click.option("--min-size", type=int, default=256, show_default=True,
              help="Smallest payload (bytes) stored once per suite; smaller ones stay in place.")
@json_option("the pack's summary")
def pack_command(snapshots: Path | str, out: Path, tasks_file: Path | None, dictionary: bool, min_size: int,
                 json_out: str | None) -> None:
    """Pack the latest snapshot of each task, deduplicated, with checksums and a manifest."""
    from ..snapshots.location import require_local
    from ..snapshots.pack import pack_suite

    r = pack_suite(require_local(snapshots, "suite pack"), out, tasks_file=tasks_file, dictionary=dictionary, min_size=min_size)
    if _machine(json_out, {"path": r.path, "snapshots": r.snapshots, "files": r.files, "bytes": r.bytes,
                           "source_bytes": r.source_bytes, "revisits": r.revisits,
                           "stored_payloads": r.stored_payloads, "dictionary_bytes": r.dictionary_bytes,
                           "notes": r.notes}):
        return
    for note in r.notes:
        click.echo(f"note: {note}")
    click.echo(f"packed {len(r.snapshots)} snapshots into {r.path}: {_mb(r.bytes)} (from {_mb(r.source_bytes)}; "
               f"{r.stored_payloads} shared payloads, {r.revisits} revisits)")


@suite.command("unpack")
@click.argument("pack", type=click.Path(path_type=Path, dir_okay=False))
@snapshots_option(help="Snapshots folder to unpack into.", name="dest")
@click.option("--tasks-out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Where to write the suite's task file (default: inside the snapshots folder).")
@json_option("what was unpacked")
def unpack_command(pack: Path, dest: Path | str, tasks_out: Path | None, json_out: str | None) -> None:
    """Check every file of a pack and verify its snapshots, then place them under the snapshots folder."""
    from ..snapshots.location import require_local
    from ..snapshots.pack import unpack_suite

    wire_index_hooks()  # large snapshots get their mapped index with replay's keys as they are placed
    r = unpack_suite(pack, require_local(dest, "suite unpack"), tasks_out=tasks_out)
    if _machine(json_out, {"root": r.root, "snapshots": r.snapshots, "stores": r.stores,
                           "tasks_file": r.tasks_file, "files_checked": r.files_checked}):
        return
    click.echo(f"unpacked {len(r.snapshots)} snapshots into {r.root} ({r.files_checked} files checked)")
    if r.tasks_file:
        click.echo(f"task file: {r.tasks_file}")


@suite.command("dedup")
@click.argument("snapshots", type=LOCATION)
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="New snapshots folder for the deduplicated copies.")
@_TASKS
@click.option("--dictionary/--no-dictionary", default=False, show_default=True,
              help="Compress with a zstd dictionary trained on the suite.")
@click.option("--min-size", type=int, default=256, show_default=True, help="Smallest payload (bytes) shared.")
def dedup_command(snapshots: Path | str, out: Path, tasks_file: Path | None, dictionary: bool, min_size: int) -> None:
    """Write deduplicated copies of a suite's latest snapshots (revisits + one shared store)."""
    from ..snapshots.dedup import dedup_snapshots
    from ..snapshots.location import require_local
    from ..snapshots.pack import choose_snapshots

    wire_index_hooks()

    r = dedup_snapshots(choose_snapshots(require_local(snapshots, "suite dedup"), tasks_file), out, min_size=min_size, dictionary=dictionary)
    for note in r.notes:
        click.echo(f"note: {note}")
    click.echo(f"wrote {len(r.snapshots)} snapshots under {r.root}: {_mb(r.bytes_out)}, "
               f"{r.stored_payloads} shared payloads, {r.revisits} revisits")


COMMANDS = [suite]
