"""The report's flip pages: why one task succeeded in one mode only.

One page per flip, ``flips/<agent>-<judge>/<task>-<live run>.html``: where the
attribution comes from, the frozen and live screenshots side by side (step by
step), and the resources that had changed at the time of the live run, each
with its visible-text lines removed and added or its JSON fields old and new.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from ..errors import Ego2WebError
from ..models import Trajectory, load_trajectory
from .attribution import ChangedResource
from .compare import Flip
from .report import _copy_asset, _safe, _table, episode_page_path

__all__ = ["flip_page_path", "flip_body"]


def _repeat(n: int) -> str:
    return f" (repeat {n})" if n else ""


def flip_page_path(agent: str, judge: str, task_id: str, live_run: str) -> str:
    """The page of one flip, relative to the report folder."""
    return f"flips/{_safe(agent)}-{_safe(judge)}/{_safe(task_id)}-{_safe(live_run)}.html"


def _trajectory(path: str | None) -> Trajectory | None:
    if not path:
        return None
    try:
        return load_trajectory(Path(path))
    except Ego2WebError:
        return None


def _shots(paths: dict[str, str | None], page: Path) -> tuple[str, int]:
    files_dir = page.with_name(page.stem + "_files")
    copied: set[Path] = set()
    sides = {}
    for mode in ("frozen", "live"):
        ep = paths.get(mode)
        traj = _trajectory(ep)
        cells = []
        for s in traj.steps if traj else []:
            img = _copy_asset(Path(ep) / s.screenshot, files_dir, copied, inside=Path(ep)) if ep and s.screenshot else None
            if img is None:
                continue
            caption = escape(f"{s.index}: {s.action.describe()}") + (f"<br>→ {escape(s.url)}" if s.url else "")
            cells.append(f'<img src="{escape(img)}" alt="{mode} screenshot after step {s.index}"><br>'
                         f"<small>{caption}</small>")
        sides[mode] = cells
    rows = [[(sides["frozen"][i] if i < len(sides["frozen"]) else "–"),
             (sides["live"][i] if i < len(sides["live"]) else "–")]
            for i in range(max(len(sides["frozen"]), len(sides["live"])))]
    if not rows:
        return '<p class="note">No screenshots stored with these episodes.</p>', 0
    table = _table(["frozen", "live"], rows)
    return f'<div class="side">{table}</div>', len(copied)


def _resource_html(r: ChangedResource, first: bool) -> str:
    codes = f"HTTP {r.status_then if r.status_then is not None else '–'} → {r.status_now if r.status_now is not None else '–'}"
    head = (f"<h3{' class=\"cause\"' if first else ''}>{escape(r.status)}: <code>{escape(r.url)}</code></h3>"
            f"<p>{escape(r.kind or 'resource')}, {codes}{', used by the final page' if r.final_page else ''}"
            f"{' (likeliest cause)' if first else ''}. {escape(r.detail)}</p>")
    parts = [head]
    if r.fields:
        parts.append(_table(["JSON field", "frozen", "live"],
                            [[f"<code>{escape(f.path)}</code>", f'<span class="removed">{escape(json.dumps(f.old))}</span>',
                              f'<span class="added">{escape(json.dumps(f.new))}</span>'] for f in r.fields]))
    if r.removed or r.added:
        lines = ([f'<span class="removed">− {escape(x)}</span>' for x in r.removed[:40]]
                 + [f'<span class="added">+ {escape(x)}</span>' for x in r.added[:40]])
        parts.append(f"<div>{''.join(lines)}</div>")
    return "\n".join(parts)


def flip_body(flip: Flip, agent: str, judge: str, paths: dict[str, str | None], page: Path) -> tuple[str, int]:
    """The HTML body of a flip's page and how many images it copied; ``paths`` maps mode → episode folder."""
    a = flip.attribution
    facts = [["task", escape(flip.task_id)], ["agent · judge", escape(f"{agent} · {judge}")],
             ["success in", escape(flip.direction)],
             ["live episode", f'<a href="../../{episode_page_path(flip.live_run, flip.task_id, "live", flip.live_repeat)}">'
                              f"{escape(flip.live_run)}{_repeat(flip.live_repeat)}</a>"],
             ["frozen episode", f'<a href="../../{episode_page_path(flip.frozen_run, flip.task_id, "frozen", flip.frozen_repeat)}">'
                                f"{escape(flip.frozen_run)}{_repeat(flip.frozen_repeat)}</a>"],
             ["site at the live run", escape(flip.drift_status)],
             ["attributed from", escape(a.source if a else "none")
              + (f" ({a.probe_id})" if a and a.probe_id else "")
              + (f", evidence of {a.at:%Y-%m-%d %H:%M} UTC" if a and a.at else "")]]
    if a and a.note:
        facts.append(["note", escape(a.note)])
    parts = [_table(None, facts), "<h2>Screenshots, frozen and live</h2>"]
    shots, copied = _shots(paths, page)
    parts.append(shots)
    parts.append("<h2>What had changed at the time of the live run</h2>")
    resources = a.resources if a else []
    if resources:
        parts.append(_table(["status", "kind", "URL", "HTTP", "detail"],
                            [[escape(r.status), escape(r.kind or "–"), f"<code>{escape(r.url)}</code>",
                              f"{r.status_then if r.status_then is not None else '–'} → "
                              f"{r.status_now if r.status_now is not None else '–'}", escape(r.detail)]
                             for r in resources], row_class=["cause"] + [""] * (len(resources) - 1)))
        parts.extend(_resource_html(r, i == 0) for i, r in enumerate(resources))
    else:
        parts.append('<p class="note">Nothing had changed on the pages the agent used: the flip is not explained by '
                     "drift.</p>" if a and a.status == "unchanged" else
                     '<p class="note">No evidence of what the site looked like at the time of the live run.</p>')
    return "\n".join(parts), copied
