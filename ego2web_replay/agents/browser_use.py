"""Convert browser-use's history JSON (``AgentHistoryList``) into our steps.

Written for browser-use 0.13 (``Agent.history.save_to_file``)::

    {"history": [{"model_output": {"thinking", "evaluation_previous_goal", "memory", "next_goal",
                                   "action": [{"navigate": {"url": ...}}, {"input": {"index", "text"}}, ...]},
                  "result": [{"is_done", "success", "extracted_content", "error"}, ...],
                  "state": {"url", "title", "screenshot_path", "interacted_element": [{"x_path", ...} | null]},
                  "metadata": {"step_start_time", "step_end_time", "step_number"}}]}

Each action of each history item becomes one :class:`Step`. An item's
``state`` is the page the model **saw** before acting, so the URL and title
*after* an item's actions are those of the next item's state (the last item
keeps its own), and so is the screenshot. The page as rendered after an item's actions
(``pages/step-NNN.json``, written by ``browser_use_main`` after each browser-use step,
NNN the item's last step) becomes that step's ``page``. Element indexes are resolved to the element's XPath
(``x_path``); typed text is kept; the model's thinking and next goal become
the thought; the item's duration (``metadata``) is shared by its actions, which
start at its start time; screenshots (files browser-use leaves in its temporary folder, or base64) are
copied into the episode. Older histories (``current_state``, ``xpath``,
``go_to_url``/``input_text``/``click_element_by_index``) are read too. Actions
with no counterpart in our vocabulary become ``wait`` steps that name the original.
:func:`final_error` reads why a run ended without ``done`` (browser-use appends a
model-less item, e.g. "Failed to complete task in maximum steps").
"""

from __future__ import annotations

import base64
import binascii
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

from ..actions import Action
from ..models import Step

__all__ = ["convert_browser_use_history", "final_error", "last_steps", "page_file"]

SEARCH_ENGINES = {"duckduckgo": "https://duckduckgo.com/?q=", "google": "https://www.google.com/search?q=",
                  "bing": "https://www.bing.com/search?q="}
PAGE_PX = 800  # browser-use scrolls in pages; one page ~ one viewport height


def _xpath(element: dict[str, Any] | None) -> str | None:
    raw = (element or {}).get("x_path") or (element or {}).get("xpath")
    return f"xpath=/{str(raw).lstrip('/')}" if raw else None


def _click(params: dict[str, Any], element: dict[str, Any] | None) -> Action:
    if sel := _xpath(element):
        return Action(kind="click", selector=sel)
    if "xpath" in params:
        return Action(kind="click", selector=f"xpath=/{str(params['xpath']).lstrip('/')}")
    x, y = params.get("coordinate_x", params.get("x")), params.get("coordinate_y", params.get("y"))
    if x is not None and y is not None:
        return Action(kind="click", x=float(x), y=float(y))
    return Action(kind="click", selector=f"[data-browser-use-index='{params.get('index')}']")


def _convert(name: str, params: dict[str, Any], element: dict[str, Any] | None) -> tuple[Action, str | None]:
    p = params or {}
    if name in ("navigate", "go_to_url", "open_tab"):
        return Action(kind="goto", url=p.get("url", "about:blank")), None
    if name in ("search", "search_google"):
        engine = SEARCH_ENGINES.get(str(p.get("engine") or ("google" if name == "search_google" else "duckduckgo")),
                                    SEARCH_ENGINES["duckduckgo"])
        return Action(kind="goto", url=engine + quote_plus(str(p.get("query", "")))), None
    if name in ("click", "click_element", "click_element_by_index"):
        return _click(p, element), None
    if name in ("input", "input_text", "type"):
        return Action(kind="type", selector=_xpath(element), value=str(p.get("text", ""))), None
    if name in ("send_keys", "press"):
        return Action(kind="press", key=str(p.get("keys") or p.get("key") or "Enter")), None
    if name in ("scroll", "scroll_down", "scroll_up"):
        if "pages" in p:
            amount = int(round(float(p.get("pages") or 1.0) * PAGE_PX))
        else:
            amount = int(p.get("amount") or 600)
        if name == "scroll_up" or p.get("down") is False:
            amount = -amount
        return Action(kind="scroll", dy=amount), None
    if name == "go_back":
        return Action(kind="back"), None
    if name == "wait":
        return Action(kind="wait", seconds=float(p.get("seconds", 1))), None
    if name == "done":
        text = p.get("text")
        if text is None and "data" in p:  # structured output
            import json

            text = json.dumps(p["data"], sort_keys=True)
        return Action(kind="answer", answer=str(text or "")), None
    return Action(kind="wait", seconds=0), f"browser-use action {name!r} has no counterpart: {p}"


def _screenshot(raw: Any, out_dir: Path, index: int) -> str | None:
    """The item's screenshot copied into ``out_dir/screenshots/`` (file or base64); None when absent."""
    if not raw or not isinstance(raw, str):
        return None
    rel = f"screenshots/step-{index:03d}.png"
    candidate = Path(raw)
    if len(raw) < 4096 and candidate.suffix.lower() in (".png", ".jpg", ".jpeg"):
        if not candidate.is_file():
            return None
        rel = f"screenshots/step-{index:03d}{candidate.suffix.lower()}"
        (out_dir / "screenshots").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(candidate, out_dir / rel)
        return rel
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return None
    (out_dir / "screenshots").mkdir(parents=True, exist_ok=True)
    (out_dir / rel).write_bytes(data)
    return rel


def _thought(output: dict[str, Any]) -> str | None:
    state = output.get("current_state")
    brain: dict[str, Any] = state if isinstance(state, dict) else output
    parts = [str(brain[k]) for k in ("thinking", "next_goal") if brain.get(k)]
    if not parts:
        parts = [str(brain[k]) for k in ("evaluation_previous_goal", "memory") if brain.get(k)][:1]
    return " | ".join(parts) or None


def _duration(meta: Any, n: int) -> float:
    if not isinstance(meta, dict) or n <= 0:
        return 0.0
    try:
        return round(max(0.0, float(meta["step_end_time"]) - float(meta["step_start_time"])) / n, 3)
    except (KeyError, TypeError, ValueError):
        return 0.0


def _started(meta: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(meta["step_start_time"]), UTC)
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return None


def _actions(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in (item.get("model_output") or {}).get("action") or [] if isinstance(a, dict) and a]


def last_steps(items: list[Any]) -> list[int | None]:
    """For each history item, the index of the last of our steps it becomes (None: it has no action)."""
    out: list[int | None] = []
    count = 0
    for item in items:
        n = len(_actions(item)) if isinstance(item, dict) else 0
        count += n
        out.append(count - 1 if n else None)
    return out


def page_file(index: int) -> str:
    """Where the page after our step ``index`` is kept (:class:`~ego2web_replay.models.PageCapture`),
    relative to the agent's out folder; ``browser_use_main`` writes it after each browser-use step."""
    return f"pages/step-{index:03d}.json"


def final_error(data: Any) -> str | None:
    """The error of a history's last item when it holds no model output (how browser-use records
    running out of steps); None otherwise."""
    items = data.get("history") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict) or items[-1].get("model_output"):
        return None
    errors = [str(r["error"]) for r in items[-1].get("result") or [] if isinstance(r, dict) and r.get("error")]
    return "; ".join(errors) or None


def convert_browser_use_history(data: Any, out_dir: Path) -> tuple[list[Step], str | None]:
    """Return our steps and the final answer (``done``'s text or the last ``is_done`` content)."""
    if isinstance(data, list):
        data = {"history": data}
    if not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise ValueError("browser-use history must be an object with a 'history' list")
    items = data["history"]
    if not all(isinstance(item, dict) for item in items):
        raise ValueError("a browser-use history item is not an object")
    steps: list[Step] = []
    answer: str | None = None
    for n, item in enumerate(items):
        output = item.get("model_output") or {}
        state = item.get("state") or {}
        after = (items[n + 1].get("state") or {}) if n + 1 < len(items) else state
        results = item.get("result") or []
        elements = state.get("interacted_element") or []
        actions = _actions(item)
        thought = _thought(output)
        duration = _duration(item.get("metadata"), len(actions))
        started = _started(item.get("metadata"))
        shot = after.get("screenshot_path") or after.get("screenshot")
        for i, act in enumerate(actions):
            name, params = next(iter(act.items()))
            element = elements[i] if i < len(elements) and isinstance(elements[i], dict) else None
            action, note = _convert(name, params if isinstance(params, dict) else {}, element)
            result = results[i] if i < len(results) and isinstance(results[i], dict) else {}
            index = len(steps)
            last = i == len(actions) - 1
            steps.append(Step(index=index, action=action,
                              url=after.get("url") if last else None, title=after.get("title") if last else None,
                              screenshot=_screenshot(shot, out_dir, index) if last else None,
                              page=page_file(index) if last and (out_dir / page_file(index)).is_file() else None,
                              error=result.get("error"), thought=note or thought, duration_s=duration,
                              started_at=started))
            if action.kind == "answer":
                answer = action.answer
        for r in results:
            if isinstance(r, dict) and r.get("is_done") and r.get("extracted_content") and answer is None:
                answer = str(r["extracted_content"])
    _fill_urls(steps)
    return steps, answer


def _fill_urls(steps: list[Step]) -> None:
    """Actions before an item's last one carry no URL of their own; the item's after-URL is the best known."""
    known_url, known_title = None, None
    for step in reversed(steps):
        if step.url is not None:
            known_url, known_title = step.url, step.title
        else:
            step.url, step.title = known_url, known_title
