"""BrowserGym's high-level actions, written down in the project's action vocabulary.

A BrowserGym agent sends Python-like calls (``click('12')``, ``fill('5', 'snack')``,
``send_msg_to_user('150 kcal')``); the environment runs them itself. For
``trajectory.json`` each step's string becomes one :class:`~ego2web_replay.models.Action`
(the raw string is kept beside it, in the trajectory's ``extra``):

=====================================  =========================================
BrowserGym                             our step
=====================================  =========================================
``send_msg_to_user(text)``             ``answer`` (the text; it ends the episode)
``report_infeasible(reason)``          ``stop`` (it ends the episode)
``goto(url)``, ``go_back()``           ``goto``, ``back``
``click``/``dblclick(bid)``            ``click`` on ``[bid="..."]`` (BrowserGym's element ids)
``mouse_click(x, y)``                  ``click`` at the coordinates
``fill(bid, value)``                   ``type`` the value into ``[bid="..."]``
``keyboard_type``/``_insert_text``     ``type`` into the focused element
``press(bid, key)``, ``keyboard_press``  ``press``
``scroll(dx, dy)``                     ``scroll``
``noop(wait_ms)``                      ``wait``
anything else                          ``wait`` of 0 s (the raw call says what it was)
=====================================  =========================================

Several calls in one step (BrowserGym's multi-action mode) give the step the answer
or stop among them, else the last call.
"""

from __future__ import annotations

from typing import Any

from ..models import Action

__all__ = ["BID_ATTRIBUTE", "parse_calls", "to_action"]

BID_ATTRIBUTE = "bid"  # browsergym.core.constants.BROWSERGYM_ID_ATTRIBUTE


def parse_calls(action: str) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """The calls in a BrowserGym action string as ``(name, args, kwargs)``; empty when it is not
    made of high-level calls (Python code under BrowserGym's ``python`` action set)."""
    from browsergym.core.action.parsers import NamedArgument, highlevel_action_parser
    from pyparsing import ParseException

    try:
        parsed = highlevel_action_parser.parse_string(action, parse_all=True)
    except ParseException:
        return []
    calls = []
    for name, arguments in parsed.as_list():
        args = [a for a in arguments if not isinstance(a, NamedArgument)]
        kwargs = {a.name: a.value for a in arguments if isinstance(a, NamedArgument)}
        calls.append((str(name), args, kwargs))
    return calls


def _arg(args: list[Any], kwargs: dict[str, Any], i: int, name: str, default: Any = None) -> Any:
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else default)


def _bid(value: Any) -> str:
    return f'[{BID_ATTRIBUTE}="{value}"]'


def _one(name: str, args: list[Any], kwargs: dict[str, Any]) -> Action | None:
    a = lambda i, n, d=None: _arg(args, kwargs, i, n, d)  # noqa: E731 - a short reader of one call
    if name == "send_msg_to_user":
        return Action(kind="answer", answer=str(a(0, "text", "")))
    if name == "report_infeasible":
        return Action(kind="stop")
    if name == "goto" and a(0, "url"):
        return Action(kind="goto", url=str(a(0, "url")))
    if name == "go_back":
        return Action(kind="back")
    if name in ("click", "dblclick") and a(0, "bid") is not None:
        return Action(kind="click", selector=_bid(a(0, "bid")))
    if name in ("mouse_click", "mouse_dblclick") and a(0, "x") is not None and a(1, "y") is not None:
        return Action(kind="click", x=float(a(0, "x")), y=float(a(1, "y")))
    if name == "fill" and a(0, "bid") is not None:
        return Action(kind="type", selector=_bid(a(0, "bid")), value=str(a(1, "value", "")))
    if name in ("keyboard_type", "keyboard_insert_text"):
        return Action(kind="type", value=str(a(0, "text", "")))
    if name == "press" and a(1, "key_comb"):
        return Action(kind="press", selector=_bid(a(0, "bid")), key=str(a(1, "key_comb")))
    if name == "keyboard_press" and a(0, "key"):
        return Action(kind="press", key=str(a(0, "key")))
    if name == "scroll":
        return Action(kind="scroll", dx=int(float(a(0, "delta_x", 0))), dy=int(float(a(1, "delta_y", 0))))
    if name == "noop":
        return Action(kind="wait", seconds=float(a(0, "wait_ms", 1000)) / 1000)
    return None


def to_action(action: str) -> Action:
    """The step a BrowserGym action string is written down as (see the module docstring)."""
    calls = parse_calls(action)
    mapped = []
    for name, args, kwargs in calls:
        try:
            mapped.append(_one(name, args, kwargs) or Action(kind="wait", seconds=0))
        except (TypeError, ValueError):  # arguments of the wrong kind: BrowserGym reports the error itself
            mapped.append(Action(kind="wait", seconds=0))
    for act in mapped:
        if act.kind in ("answer", "stop"):
            return act
    return mapped[-1] if mapped else Action(kind="wait", seconds=0)
