"""Loading agents and judges that live outside this package, one way for both.

A plugin is a *factory*: a callable that takes the plugin's settings as
keyword arguments and returns an agent (or a judge) whose ``spec`` says what it
is. It is named either

* by an entry point of an installed distribution, in the group
  ``ego2web_replay.agents`` or ``ego2web_replay.judges``
  (``[project.entry-points."ego2web_replay.judges"] strict = "mypkg.judges:strict"``),
  and then used by that name (``--judge strict``); or
* directly as ``module.path:factory`` (``--judge mypkg.judges:strict``).

:func:`build` calls the factory and records, in the result's spec, the plugin
it came from (``spec.plugin``) and the settings it was given (in
``spec.settings``, beside anything the plugin recorded itself), so every
trajectory and verdict says exactly what produced it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import PurePath
from typing import Any

from .errors import Ego2WebError

__all__ = ["AGENT_GROUP", "JUDGE_GROUP", "PluginError", "plugin_names", "find_factory", "build"]

AGENT_GROUP = "ego2web_replay.agents"
JUDGE_GROUP = "ego2web_replay.judges"


class PluginError(Ego2WebError):
    """A named plugin exists but cannot be loaded or built."""


def plugin_names(group: str) -> list[str]:
    """The names installed distributions register in ``group``, sorted."""
    return sorted({ep.name for ep in entry_points(group=group)})


def _entry_point(group: str, name: str) -> Callable[..., Any] | None:
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        return None
    try:
        factory = found[0].load()
    except Exception as e:  # noqa: BLE001 - any import failure of a third-party plugin
        raise PluginError(f"cannot load plugin {name!r} ({found[0].value}) of {group}: "
                          f"{type(e).__name__}: {e}") from None
    return factory  # type: ignore[no-any-return]


def _module_attr(name: str, kind: str) -> Callable[..., Any]:
    module, _, attr = name.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise PluginError(f"cannot load {kind} factory {name!r}: {e}") from None
    if not callable(obj):
        raise PluginError(f"{name!r} is not callable; name a factory function or class")
    return obj  # type: ignore[no-any-return]


def find_factory(name: str, group: str, kind: str) -> Callable[..., Any] | None:
    """The factory ``name`` points at: an entry point of ``group``, else ``module:factory``;
    None when ``name`` is neither."""
    factory = _entry_point(group, name)
    if factory is not None:
        return factory
    if ":" in name and not name.startswith(("http:", "https:")):
        return _module_attr(name, kind)
    return None


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a setting for the spec (paths as strings, other objects by type name)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__}>"


def build(factory: Callable[..., Any], name: str, settings: Mapping[str, Any], *, kind: str) -> Any:
    """Call ``factory(**settings)`` and record ``name`` and the settings in the result's ``spec``."""
    try:
        obj = factory(**settings)
    except Ego2WebError:
        raise
    except TypeError as e:
        raise PluginError(f"{kind} {name!r} does not take these settings ({', '.join(settings) or 'none'}): {e}") from None
    spec = getattr(obj, "spec", None)
    if spec is None or not hasattr(spec, "settings"):
        raise PluginError(f"{kind} {name!r} built a {type(obj).__name__} without a spec; "
                          f"give it a `spec` ({'AgentSpec' if kind == 'agent' else 'JudgeSpec'})")
    spec.plugin = name
    spec.settings = {**{k: _plain(v) for k, v in settings.items()}, **(spec.settings or {})}
    return obj
