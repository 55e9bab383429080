"""The tracking database as a listener: stages emit results, the command layer hands them here.

``record``, ``run``, ``judge``, ``drift diff`` and ``drift probe`` never write to the database
themselves: they return (or call back with) what they made, and a command that
was given ``--db`` passes each result to one :class:`TrackingSink`. Runs write
from the parent process only: worker processes return episode summaries and
the parent records them.

Snapshots, runs, episodes and verdicts are files first; if the database cannot
take them, the sink says so once through ``warn`` and stops writing, and
``ingest`` can load the files later. Probe rows exist only in the database, so
a failure to store them is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import Ego2WebError
from ..models import Verdict
from .drift import ProbeResult, record_probe
from .ingest import record_episode, record_run, record_snapshot, record_verdict
from .pairdiff import PairDiff
from .pairdiff_store import record_pair_diffs

__all__ = ["TrackingSink"]


class TrackingSink:
    """Writes each stage's results to the tracking database at ``db``, one transaction each."""

    def __init__(self, db: str | Path, *, warn: Callable[[str], None] | None = None) -> None:
        self.db = Path(db)
        self.warn = warn
        self.error: str | None = None

    def _write(self, what: str, write: Callable[[], object]) -> None:
        if self.error is not None:
            return
        try:
            write()
        except Ego2WebError as e:  # the files are written; the database can be rebuilt with `ingest`
            self.error = str(e)
            if self.warn is not None:
                self.warn(f"{what} not recorded in {self.db} (use `ingest` later): {self.error}")

    def snapshot_recorded(self, snapshot_dir: Path, location: str | None = None) -> None:
        """A snapshot folder was written (``record``); ``location``: where it was uploaded, if elsewhere."""
        self._write("snapshots", lambda: record_snapshot(self.db, snapshot_dir, location=location))

    def run_started(self, run_dir: Path) -> None:
        """A run folder exists (new or resumed): its row and any episodes already finished."""
        self._write("the run", lambda: record_run(self.db, run_dir))

    def episode_finished(self, run_dir: Path, episode_dir: Path) -> None:
        """One episode folder is complete (its trajectory and any verdicts beside it)."""
        self._write("episodes", lambda: record_episode(self.db, run_dir, episode_dir))

    def verdict_made(self, episode_dir: Path, verdict: Verdict, judge: str | None = None) -> None:
        """A judge wrote one verdict of the episode in ``episode_dir``."""
        self._write("verdicts", lambda: record_verdict(self.db, episode_dir, verdict, judge=judge))

    def pair_diffed(self, diffs: Sequence[PairDiff]) -> None:
        """Pair diffs of live archives against frozen snapshots (``drift diff``); they can be computed
        again from the files, so a failure warns like the other file-backed results."""
        self._write("pair diffs", lambda: record_pair_diffs(self.db, list(diffs)))

    def probed(self, rows: Sequence[ProbeResult]) -> None:
        """One drift probe's rows; they exist nowhere else, so a failure raises."""
        record_probe(self.db, list(rows))
