"""Convert browser-use's history JSON (``AgentHistoryList``) into our steps.

browser-use writes ``{"history": [{"model_output": {"current_state": {...},
"action": [{"go_to_url": {"url": ...}}, ...]}, "result": [{"is_done": ...,
"extracted_content": ..., "error": ...}], "state": {"url": ..., "title": ...,
"screenshot": <base64 or path>, "interacted_element": [...]}}]}``. Each action
of each history item becomes one :class:`Step`; element indexes are resolved to
the XPath browser-use recorded for them when present. Actions with no
counterpart in our vocabulary become ``wait`` steps that name the original.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from ..models import Action, Step

__all__ = ["convert_browser_use_history"]


def _click(params: dict[str, Any], element: dict[str, Any] | None) -> Action:
    if element and element.get("xpath"):
        return Action(kind="click", selector=f"xpath=/{element['xpath'].lstrip('/')}")
    if "xpath" in params:
        return Action(kind="click", selector=f"xpath=/{str(params['xpath']).lstrip('/')}")
    if "x" in params and "y" in params:
        return Action(kind="click", x=float(params["x"]), y=float(params["y"]))
    return Action(kind="click", selector=f"[data-browser-use-index='{params.get('index')}']")


def _convert(name: str, params: dict[str, Any], element: dict[str, Any] | None) -> tuple[Action, str | None]:
    p = params or {}
    if name in ("go_to_url", "open_tab", "navigate"):
        return Action(kind="goto", url=p.get("url", "about:blank")), None
    if name in ("search_google", "search"):
        from urllib.parse import quote_plus

        return Action(kind="goto", url="https://www.google.com/search?q=" + quote_plus(str(p.get("query", "")))), None
    if name in ("click_element", "click_element_by_index", "click"):
        return _click(p, element), None
    if name in ("input_text", "type"):
        sel = f"xpath=/{element['xpath'].lstrip('/')}" if element and element.get("xpath") else None
        return Action(kind="type", selector=sel, value=str(p.get("text", ""))), None
    if name in ("send_keys", "press"):
        return Action(kind="press", key=str(p.get("keys") or p.get("key") or "Enter")), None
    if name in ("scroll_down", "scroll_up", "scroll"):
        amount = int(p.get("amount") or 600)
        if name == "scroll_up" or p.get("down") is False:
            amount = -amount
        return Action(kind="scroll", dy=amount), None
    if name == "go_back":
        return Action(kind="back"), None
    if name == "wait":
        return Action(kind="wait", seconds=float(p.get("seconds", 1))), None
    if name == "done":
        return Action(kind="answer", answer=str(p.get("text", ""))), None
    return Action(kind="wait", seconds=0), f"browser-use action {name!r} has no counterpart: {p}"


def _screenshot(raw: Any, out_dir: Path, index: int) -> str | None:
    if not raw or not isinstance(raw, str):
        return None
    candidate = Path(raw)
    if len(raw) < 4096 and candidate.suffix in (".png", ".jpg", ".jpeg") and candidate.exists():
        return str(candidate)
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return None
    rel = f"screenshots/step-{index:03d}.png"
    (out_dir / "screenshots").mkdir(parents=True, exist_ok=True)
    (out_dir / rel).write_bytes(data)
    return rel


def convert_browser_use_history(data: Any, out_dir: Path) -> tuple[list[Step], str | None]:
    """Return our steps and the final answer (``done``'s text or the last ``is_done`` content)."""
    if isinstance(data, list):
        data = {"history": data}
    if not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise ValueError("browser-use history must be an object with a 'history' list")
    steps: list[Step] = []
    answer: str | None = None
    for item in data["history"]:
        if not isinstance(item, dict):
            raise ValueError("a browser-use history item is not an object")
        output = item.get("model_output") or {}
        state = item.get("state") or {}
        results = item.get("result") or []
        elements = state.get("interacted_element") or []
        thought = None
        cs = output.get("current_state") or {}
        if isinstance(cs, dict):
            thought = cs.get("next_goal") or cs.get("evaluation_previous_goal") or cs.get("memory")
        for i, act in enumerate(output.get("action") or []):
            if not isinstance(act, dict) or not act:
                continue
            name, params = next(iter(act.items()))
            element = elements[i] if i < len(elements) and isinstance(elements[i], dict) else None
            action, note = _convert(name, params if isinstance(params, dict) else {}, element)
            result = results[i] if i < len(results) and isinstance(results[i], dict) else {}
            index = len(steps)
            steps.append(Step(index=index, action=action, url=state.get("url"), title=state.get("title"),
                              screenshot=_screenshot(state.get("screenshot") or state.get("screenshot_path"),
                                                     out_dir, index),
                              error=result.get("error"), thought=note or thought))
            if action.kind == "answer":
                answer = action.answer
        for r in results:
            if isinstance(r, dict) and r.get("is_done") and r.get("extracted_content") and answer is None:
                answer = str(r["extracted_content"])
    return steps, answer
