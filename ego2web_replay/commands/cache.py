"""``ego2web-replay cache``: what the data folder's index cache holds, and pruning it."""

from __future__ import annotations

import click

from ._options import Finite

__all__ = ["COMMANDS"]


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


@click.group("cache")
def cache_group() -> None:
    """The index cache: parsed indexes, mapped indexes, canonical keys and the volatility learned
    from indexes that have no volatile.json, kept in the data folder (index-cache/) so that
    snapshots open fast. It is never the source of truth: a missing file is rebuilt from the
    snapshot's index when next needed."""


@cache_group.command("info")
def cache_info() -> None:
    """Where the cache is, how many files and bytes it holds, and when the oldest was last used."""
    import time

    from ..snapshots.index_cache import cache_dir, cache_files

    files = cache_files()
    click.echo(f"index cache: {cache_dir()}")
    if not files:
        click.echo("empty")
        return
    days = (time.time() - files[0].last_used) / 86400
    click.echo(f"{len(files)} files, {_mib(sum(f.size for f in files))}; the least recently used "
               f"was last used {days:.1f} days ago")


@cache_group.command("prune")
@click.option("--days", type=Finite(0), default=30.0, show_default=True,
              help="Remove the files not used for this many days (0: every file).")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def cache_prune(days: float, dry_run: bool) -> None:
    """Remove cache files not used for --days days: those of indexes that changed or went away,
    or of snapshots not replayed lately (they are rebuilt when needed)."""
    from ..snapshots.index_cache import cache_dir, prune_cache

    removed, kept = prune_cache(days, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{cache_dir()}: {verb} {len(removed)} files ({_mib(sum(f.size for f in removed))}) "
               f"not used for {days:g} days; kept {len(kept)} ({_mib(sum(f.size for f in kept))})")


COMMANDS = [cache_group]
