"""The machine's process table read from ``/proc``: for tests and fixtures that check what is left running."""

from __future__ import annotations

from pathlib import Path

__all__ = ["process_table", "descendants"]


def process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command name), from ``/proc/<pid>/stat``."""
    out: dict[int, tuple[int, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry.name)] = (int(fields[1]), fields[0], name)
    return out


def descendants(root: int) -> dict[int, str]:
    """Every process below ``root``, pid -> command name, parents before their children."""
    children: dict[int, list[tuple[int, str]]] = {}
    for pid, (ppid, _state, name) in process_table().items():
        children.setdefault(ppid, []).append((pid, name))
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        for pid, name in children.get(frontier.pop(), []):
            if pid not in found:
                found[pid] = name
                frontier.append(pid)
    return found
