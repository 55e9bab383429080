"""Pair diffs as lines of text (what ``drift diff`` prints)."""

from __future__ import annotations

from .pairdiff import PairDiff, ResourceDiff

__all__ = ["diff_lines", "resource_line"]


def resource_line(r: ResourceDiff) -> str:
    """``status  then->now  kind  URL  detail`` for one resource."""
    codes = f"{r.status_then if r.status_then is not None else '-'}->{r.status_now if r.status_now is not None else '-'}"
    mark = "*" if r.final_page else " "
    detail = f"  {r.detail}" if r.detail else ""
    return f"  {mark}{r.status:9} {codes:8} {r.kind:8} {r.method} {r.url}{detail}"


def diff_lines(d: PairDiff, *, show_all: bool = False) -> list[str]:
    """A heading per pair and a line per resource that is not unchanged (every one with ``show_all``)."""
    counts = d.counts()
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    lines = [f"{d.task_id}: {d.status}  (live {d.live_snapshot_id} vs frozen {d.frozen_snapshot_id}; "
             f"{summary or 'no resources'})"]
    shown = d.resources if show_all else d.changes()
    lines.extend(resource_line(r) for r in shown)
    if shown and any(r.final_page for r in shown):
        lines.append("  (* used by the agent's final page)")
    return lines
