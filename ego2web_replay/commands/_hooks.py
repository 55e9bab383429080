"""Wiring between layers that the commands do: replay's canonical keys built with every index.

The snapshots layer builds a large index's mapped form when it writes the index (record, import,
extend, ``snapshot index``) but may not import replay, so it cannot compute replay's canonical match
keys; without them the first mapped replay of a large snapshot would build them itself (seconds, and
a heap of keys). A command that writes indexes calls :func:`wire_index_hooks` first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ..snapshots.first_open import RowKeys
    from ..snapshots.index_map import IndexMap

__all__ = ["wire_index_hooks"]


def _canonical_keys(imap: IndexMap) -> None:
    from ..replay.mapped import build_default_canonical

    build_default_canonical(imap)


def _canonical_rows(folder: Path) -> RowKeys:
    from ..replay.mapped import default_canonical_keys

    return default_canonical_keys(folder)


def wire_index_hooks() -> None:
    """Have indexes built from now on in this process get replay's canonical keys (built-in rules)."""
    from ..snapshots.index_map import add_map_hook

    add_map_hook("replay.canonical", _canonical_keys, rows=_canonical_rows)
