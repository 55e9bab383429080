"""What the first open of a snapshot builds from its index, from one read of it.

A snapshot opened without its caches (copied without its side files, written before they existed,
or opened with an empty data folder) has its index read for the mapped index (:mod:`.index_map`),
for the names learned volatile when it has no ``volatile.json`` (:mod:`.learned_cache`), and for
what the layers above derive from the rows (replay's canonical match keys). :func:`build_first_open`
reads the file once (:func:`~.indexscan.scan_index`) and hands each block of rows to all of them;
each writes the very file it writes when built on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .index_map import IndexMap, MapBuilder
from .indexscan import Batch, IrregularIndex, collector_paused, scan_index
from .learned_cache import Learner, index_identity, keep_learned
from .sortedfile import SortedFile

if TYPE_CHECKING:
    import numpy as np

__all__ = ["RowKeys", "build_first_open"]


class RowKeys(Protocol):
    """A table built from an index's rows beside its map: fed the rows in file order, written once the
    map says where each row stands in recorded order."""

    def add_batch(self, batch: Batch) -> None:
        """Take the rows of one block of the index."""

    def finish(self, imap: IndexMap, rank: np.ndarray) -> None:
        """Write the table (``rank[i]``: the recorded position of the ``i``-th row given)."""

    def close(self) -> None:
        """Let go of what was gathered (written or not)."""


def build_first_open(index: Path, *, learn: bool, keys: Sequence[RowKeys] = (), min_rows: int = 0) -> bool:
    """Build the mapped index of ``index``, the tables of ``keys`` and, with ``learn``, the names
    learned volatile (kept in ``index-cache/`` as :func:`~.learned_cache.learned_of_index` keeps
    them), from one read of the file. False, with nothing written, when the index needs the line
    readers (:class:`~.indexscan.IrregularIndex`): build each then on its own. An index of fewer
    than ``min_rows`` servable rows gets nothing built (True: nothing is left to build)."""
    index = Path(index)
    identity = index_identity(index) if learn else None
    learner = Learner() if learn else None

    def feed(batch: Batch) -> None:
        if learner is not None:
            learner.add_batch(batch)
        for table in keys:
            table.add_batch(batch)

    try:
        try:
            with MapBuilder(index) as builder, collector_paused():
                for batch in scan_index(index):
                    builder.add_batch(batch)
                    feed(batch)
                if builder.count < min_rows:
                    return True
                if learner is not None:  # before the map is sorted: its arrays are let go first
                    keep_learned(index, identity, learner.learn(index))
                target, rank = builder.write()
        except IrregularIndex:
            return False
        imap = IndexMap(SortedFile(target), index)
        try:
            for table in keys:
                table.finish(imap, rank)
        finally:
            imap.close()
    finally:
        for table in keys:
            table.close()
    return True
