"""Matching rules: which request parameters and body fields are volatile.

The rules live in YAML files; the built-in ``rules.yaml`` beside this module
documents the format at its top. :func:`load_rules` reads it plus any extra
files a user names, and :meth:`MatchRules.for_host` resolves the effective,
compiled rules of one host (defaults plus every host entry that is a suffix of
the host, most specific last).
"""

from __future__ import annotations

import fnmatch
import functools
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ReplayError

__all__ = ["HostRules", "RulesFile", "MatchRules", "CompiledRules", "load_rules", "default_rules"]

_LIST_FIELDS = (
    "volatile_params",
    "session_params",
    "timestamp_params",
    "callback_params",
    "keep_params",
    "volatile_fields",
    "fresh_id_params",
    "content_params",
)


class HostRules(BaseModel):
    """Rules of the defaults or of one host entry; every field is optional."""

    model_config = ConfigDict(extra="forbid")

    volatile_params: list[str] = Field(default_factory=list, description="Query parameters dropped from the key.")
    session_params: list[str] = Field(default_factory=list, description="Session-id parameters (query and `;name=` path parameters).")
    timestamp_params: list[str] = Field(default_factory=list, description="Dropped when the value looks like an epoch time.")
    callback_params: list[str] = Field(default_factory=list, description="JSONP callbacks: name kept, value dropped.")
    keep_params: list[str] = Field(default_factory=list, description="Never dropped, whatever else matches.")
    volatile_fields: list[str] = Field(default_factory=list, description="Body fields ignored (form, JSON leaf, multipart).")
    drop_epoch_values: bool | None = Field(default=None, description="Drop any value that is an epoch time.")
    drop_datetime_fields: bool | None = Field(default=None, description="Drop body fields holding an ISO date-time.")
    epoch_years: tuple[int, int] | None = Field(default=None, description="Years that count as epoch times.")
    fuzzy_threshold: float | None = Field(default=None, ge=0.0, le=1.0, description="Least fuzzy similarity.")
    fresh_ids: bool | None = Field(default=None, description="Ignore fresh random-id values (see freshids.py).")
    fresh_id_params: list[str] = Field(default_factory=list, description="Names whose id-shaped values are fresh "
                                       "ids even though they look like content names (cid, requestId).")
    content_params: list[str] = Field(default_factory=list, description="Names that choose content: their "
                                      "values are never fresh ids, whatever their shape.")

    def merged(self, other: HostRules) -> HostRules:
        """Lists add up (``other`` after ``self``); ``other``'s scalars win when set."""
        data: dict[str, Any] = {}
        for name in _LIST_FIELDS:
            data[name] = [*getattr(self, name), *getattr(other, name)]
        for name in ("drop_epoch_values", "drop_datetime_fields", "epoch_years", "fuzzy_threshold", "fresh_ids"):
            value = getattr(other, name)
            data[name] = value if value is not None else getattr(self, name)
        return HostRules(**data)


def _glob_regex(patterns: list[str]) -> re.Pattern[str] | None:
    """One case-insensitive regex matching any of the globs (None when empty)."""
    if not patterns:
        return None
    parts = sorted({fnmatch.translate(p.lower()) for p in patterns})
    return re.compile("|".join(f"(?:{p})" for p in parts))


PARAM_PLAIN, PARAM_KEEP, PARAM_DROP, PARAM_CALLBACK, PARAM_TIMESTAMP = range(5)


@dataclass(frozen=True, slots=True)
class CompiledRules:
    """The effective rules of one host, compiled for fast matching."""

    volatile: re.Pattern[str] | None
    session: re.Pattern[str] | None
    timestamp: re.Pattern[str] | None
    callback: re.Pattern[str] | None
    keep: re.Pattern[str] | None
    fields: re.Pattern[str] | None
    drop_epoch_values: bool
    drop_datetime_fields: bool
    epoch_seconds: tuple[int, int]
    fuzzy_threshold: float
    fresh_ids: bool = True
    fresh_names: re.Pattern[str] | None = None
    content_names: re.Pattern[str] | None = None
    _params: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _fields: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _fresh: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)
    fresh_memo: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)
    """By canonical pair name (encoded, body-prefixed): whether it may hold fresh ids (freshids.py fills it)."""

    def param_class(self, lname: str) -> int:
        """PARAM_KEEP, PARAM_DROP, PARAM_CALLBACK, PARAM_TIMESTAMP or PARAM_PLAIN (memoised)."""
        cls = self._params.get(lname)
        if cls is None:
            if self.is_kept(lname):
                cls = PARAM_KEEP
            elif self.is_volatile_param(lname):
                cls = PARAM_DROP
            elif self.is_callback_param(lname):
                cls = PARAM_CALLBACK
            elif self.is_timestamp_param(lname):
                cls = PARAM_TIMESTAMP
            else:
                cls = PARAM_PLAIN
            self._params[lname] = cls
        return cls

    def field_class(self, lname: str) -> int:
        """PARAM_KEEP, PARAM_DROP or PARAM_PLAIN for a body field name (memoised)."""
        cls = self._fields.get(lname)
        if cls is None:
            cls = PARAM_KEEP if self.is_kept(lname) else PARAM_DROP if self.is_volatile_field(lname) else PARAM_PLAIN
            self._fields[lname] = cls
        return cls

    @staticmethod
    def _hit(pattern: re.Pattern[str] | None, name: str) -> bool:
        return pattern is not None and pattern.fullmatch(name) is not None

    def is_kept(self, lname: str) -> bool:
        return self._hit(self.keep, lname)

    def is_volatile_param(self, lname: str) -> bool:
        return self._hit(self.volatile, lname) or self._hit(self.session, lname)

    def is_session_param(self, lname: str) -> bool:
        return self._hit(self.session, lname)

    def is_timestamp_param(self, lname: str) -> bool:
        return self._hit(self.timestamp, lname)

    def is_callback_param(self, lname: str) -> bool:
        return self._hit(self.callback, lname)

    def is_volatile_field(self, lname: str) -> bool:
        return self._hit(self.fields, lname)

    def fresh_id_name(self, lname: str) -> bool:
        """Whether an id-shaped value under this (lower-cased) name may be a fresh id (memoised):
        not kept, and a fresh-id name or else no content name."""
        ok = self._fresh.get(lname)
        if ok is None:
            ok = not self.is_kept(lname) and (self._hit(self.fresh_names, lname)
                                               or not self._hit(self.content_names, lname))
            self._fresh[lname] = ok
        return ok

    def fresh_listed(self, lname: str) -> bool:
        """Whether the (lower-cased) name is a ``fresh_id_params`` one: a random id under it is surely fresh."""
        return self._hit(self.fresh_names, lname)

    def is_epoch(self, value: str) -> bool:
        """True for a 10-digit (s) or 13-digit (ms) number inside the epoch window."""
        n = len(value)
        if n not in (10, 13) or not value.isdigit():
            return False
        seconds = int(value) // 1000 if n == 13 else int(value)
        return self.epoch_seconds[0] <= seconds <= self.epoch_seconds[1]


def _year_start(year: int) -> int:
    return int(datetime(year, 1, 1, tzinfo=UTC).timestamp())


class RulesFile(BaseModel):
    """The contents of one rules file: global defaults plus per-host entries."""

    model_config = ConfigDict(extra="forbid")

    defaults: HostRules = Field(default_factory=HostRules)
    hosts: dict[str, HostRules] = Field(default_factory=dict, description="Keys are host suffixes.")


class MatchRules:
    """Effective matching rules: defaults plus per-host entries (keys are host suffixes).

    Built from validated :class:`RulesFile` data; compiled per-host rules are
    cached, so looking a host up again is one dict access.
    """

    def __init__(self, defaults: HostRules | None = None, hosts: dict[str, HostRules] | None = None) -> None:
        self.defaults = defaults or HostRules()
        self.hosts = {h.lower().strip("."): entry for h, entry in (hosts or {}).items()}
        self._cache: dict[str, CompiledRules] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file_data(cls, data: RulesFile) -> MatchRules:
        return cls(data.defaults, data.hosts)

    def merged(self, other: MatchRules) -> MatchRules:
        """These rules extended by ``other`` (lists add up, scalars override)."""
        hosts = dict(self.hosts)
        for host, entry in other.hosts.items():
            hosts[host] = hosts[host].merged(entry) if host in hosts else entry
        return MatchRules(self.defaults.merged(other.defaults), hosts)

    def host_entries(self, host: str) -> list[str]:
        """The host entries that apply to ``host``, least specific first."""
        host = host.lower().strip(".")
        found = [h for h in self.hosts if host == h or host.endswith("." + h)]
        return sorted(found, key=len)

    def for_host(self, host: str) -> CompiledRules:
        """The effective compiled rules of ``host`` (cached; thread-safe)."""
        cached = self._cache.get(host)
        if cached is not None:
            return cached
        effective = self.defaults
        for entry in self.host_entries(host):
            effective = effective.merged(self.hosts[entry])
        years = effective.epoch_years or (2010, 2040)
        compiled = CompiledRules(
            volatile=_glob_regex(effective.volatile_params),
            session=_glob_regex(effective.session_params),
            timestamp=_glob_regex(effective.timestamp_params),
            callback=_glob_regex(effective.callback_params),
            keep=_glob_regex(effective.keep_params),
            fields=_glob_regex(effective.volatile_fields),
            drop_epoch_values=effective.drop_epoch_values if effective.drop_epoch_values is not None else False,
            drop_datetime_fields=effective.drop_datetime_fields if effective.drop_datetime_fields is not None else False,
            epoch_seconds=(_year_start(years[0]), _year_start(years[1] + 1) - 1),
            fuzzy_threshold=effective.fuzzy_threshold if effective.fuzzy_threshold is not None else 0.5,
            fresh_ids=effective.fresh_ids if effective.fresh_ids is not None else True,
            fresh_names=_glob_regex(effective.fresh_id_params),
            content_names=_glob_regex(effective.content_params),
        )
        with self._lock:
            self._cache[host] = compiled
        return compiled


def _read_rules_text(text: str, source: str) -> MatchRules:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ReplayError(f"rules file {source} is not valid YAML ({exc.__class__.__name__}); fix its syntax") from exc
    if not isinstance(data, dict):
        raise ReplayError(f"rules file {source} must be a mapping with 'defaults' and/or 'hosts'")
    try:
        return MatchRules.from_file_data(RulesFile.model_validate(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReplayError(f"rules file {source}: {where}: {first['msg']}; see the format at the top of the built-in rules.yaml") from exc


def default_rules() -> MatchRules:
    """The built-in rules (``ego2web_replay/replay/rules.yaml``), a new object each call (parsed once)."""
    return MatchRules.from_file_data(_builtin_rules_file().model_copy(deep=True))


@functools.cache
def _builtin_rules_file() -> RulesFile:
    """The built-in rules file parsed and checked, once per process (each replay opened needs it)."""
    text = resources.files(__package__).joinpath("rules.yaml").read_text(encoding="utf-8")
    try:
        return RulesFile.model_validate(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ValidationError):  # cannot happen for the shipped file; the usual message if it does
        _read_rules_text(text, "rules.yaml (built-in)")
        raise


def load_rules(extra_files: list[Path] | None = None) -> MatchRules:
    """The built-in rules extended by ``extra_files`` in order.

    Lists add up and scalars (thresholds, switches) of later files win.
    Raises :class:`ReplayError` when a file is missing or does not validate.
    """
    rules = default_rules()
    for path in extra_files or []:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ReplayError(f"cannot read rules file {path}: {exc.strerror}; check the path") from exc
        rules = rules.merged(_read_rules_text(text, str(path)))
    return rules
