"""A scripted "model" for browser-use, served by :class:`~ego2web_replay.testing.openai_server.FakeOpenAIServer`.

browser-use (0.13) asks for its ``AgentOutput`` as structured output: a JSON
object ``{thinking, evaluation_previous_goal, memory, next_goal, action: [{name: params}]}``
whose element indexes come from the browser state in its last user message
(``[12]<input id=q ... />`` then the element's text on the next line). A
:class:`BrowserUsePlan` reads that state, picks the rule for the current page's
URL and answers its actions, with element references resolved to this page's
indexes::

    plan = BrowserUsePlan({
        "/shop/search": [Act("click", element="Crunchy Corn Snack")],
        "/shop/item/": [Act("done", text="150 kcal")],
        "/shop": [Act("input", element="id=q", text="crunchy"), Act("send_keys", keys="Enter")],
    })
    with FakeOpenAIServer(plan) as srv: ...

Rules are tried in order; the first whose text occurs in the URL wins. A page no
rule covers (or an element not found) is answered HTTP 500 and kept in ``errors``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .openai_server import Reply

__all__ = ["Act", "BrowserUsePlan", "state_text", "current_url", "element_index"]

_TAB = re.compile(r"^Current tab: (\S+)$", re.M)


@dataclass
class Act:
    """One browser-use action; ``element`` (text of the element or of its tag line) becomes ``index``."""

    name: str
    element: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, element: str | None = None, **params: Any) -> None:
        self.name, self.element, self.params = name, element, params


def state_text(body: dict[str, Any]) -> str:
    """The text of the request's last user message (browser-use's browser state)."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "text")
    return ""


def current_url(state: str) -> str:
    """The URL of the current tab in a browser state (``Tab <id>: <url> - <title>``)."""
    m = _TAB.search(state)
    if m:
        tab = re.search(rf"^Tab {re.escape(m.group(1))}: (\S+)", state, re.M)
        if tab:
            return tab.group(1)
    return ""


def element_index(state: str, ref: str) -> int:
    """The index of the first element whose tag line or following text line contains ``ref``."""
    lines = state.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"\[(\d+)\]<", line)
        if not m:
            continue
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if ref in line[m.start():] or ref == following:
            return int(m.group(1))
    raise LookupError(f"no element matching {ref!r} in the browser state")


class BrowserUsePlan:
    """A reply callable for ``FakeOpenAIServer``; ``urls`` keeps the page URL each call saw."""

    def __init__(self, rules: dict[str, list[Act]]) -> None:
        self.rules = rules
        self.urls: list[str] = []
        self.errors: list[str] = []

    def __call__(self, body: dict[str, Any]) -> str | Reply:
        state = state_text(body)
        url = current_url(state)
        self.urls.append(url)
        try:
            return self._reply(state, url)
        except LookupError as e:
            self.errors.append(str(e))
            return Reply(status=500, error=str(e))

    def _reply(self, state: str, url: str) -> str:
        for key, acts in self.rules.items():
            if key in url:
                actions = []
                for act in acts:
                    params = dict(act.params)
                    if act.element is not None:
                        params["index"] = element_index(state, act.element)
                    actions.append({act.name: params})
                return json.dumps({"thinking": f"on {url}", "evaluation_previous_goal": "as planned",
                                   "memory": f"step {len(self.urls)}", "next_goal": f"{acts[0].name} on {key}",
                                   "action": actions})
        raise LookupError(f"no rule for the page {url!r}")
