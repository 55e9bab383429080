"""One replay configuration, shared by ``serve``, ``run --mode frozen`` and the Python API.

:class:`ReplayConfig` holds every setting that decides what a replay answers:
extra rules files, the repeated-capture policy, the determinism freeze, the
miss policy and the opt-in nearest-capture matching with its threshold. It is
written into ``run.json`` (``settings.replay``) and into every episode's
``replay_stats.json`` (``config``), so a frozen score always says how it was
replayed. The CLI options that build it are declared once
(:mod:`ego2web_replay.commands.replay_options`). It lives with the other models because
``run.json`` (:class:`~.run.RunSettings`) and ``replay_stats.json`` carry it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ReplayConfig", "MISS_POLICIES", "SequencePolicy", "Engine", "ENGINES"]

MISS_POLICIES = "a status code (404, 410, 502, 504 ...) or 'live'"
SequencePolicy = Literal["sequence", "first", "last"]
Engine = Literal["fast", "mitmproxy"]
ENGINES = ("fast", "mitmproxy")


class ReplayConfig(BaseModel):
    """How a snapshot is replayed (see docs/matching.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules_files: tuple[str, ...] = Field(default=(), description="Extra matching-rules files (YAML), in order.")
    sequence: SequencePolicy = Field(default="sequence", description="Repeated captures of one request: "
                                     "in recorded order then the last, always the first, or always the last.")
    freeze: bool = Field(default=True, description="Inject the clock/randomness freeze into HTML.")
    miss: str = Field(default="404", description="Answer to a miss: an HTTP status, or 'live' (diagnosis only).")
    fuzzy: bool = Field(default=False, description="Opt-in nearest-capture matching (diagnosis only; "
                        "such answers are another page's content, counted as 'fuzzy').")
    fuzzy_threshold: float | None = Field(default=None, ge=0.0, le=1.0,
                                          description="Least similarity for the nearest capture (default: rules').")
    seed: int | None = Field(default=None, description="Seed of the page's randomness (default: from the snapshot id).")
    share_window_s: float | None = Field(default=None, gt=0, description="Frozen replay: answer a request the "
                                         "snapshot lacks from the latest snapshot of every other task of the same "
                                         "snapshots root recorded within this many seconds of it (None: off; "
                                         "docs/matching.md, 'Shared captures').")
    engine: Engine = Field(default="fast", description="What carries requests: the fast asyncio front end, "
                           "or mitmproxy (needed for miss=live). Both answer the same bytes.")

    @model_validator(mode="before")
    @classmethod
    def _live_needs_mitmproxy(cls, values: Any) -> Any:
        """``miss=live`` forwards upstream, which only the mitmproxy engine does: it picks that engine."""
        if isinstance(values, dict) and str(values.get("miss", "")).strip().lower() == "live":
            if values.get("engine") == "fast":
                raise ValueError("miss=live forwards requests upstream; the fast engine never does "
                                 "(use engine mitmproxy)")
            values = {**values, "engine": "mitmproxy"}
        return values

    @field_validator("miss")
    @classmethod
    def _check_miss(cls, value: str) -> str:
        value = str(value).strip().lower()
        if value == "live":
            return value
        try:
            code = int(value)
        except ValueError:
            raise ValueError(f"unknown miss policy {value!r}; use {MISS_POLICIES}") from None
        if not 100 <= code <= 599:
            raise ValueError(f"miss status {code} is not an HTTP status")
        return str(code)

    @classmethod
    def make(cls, **values: Any) -> ReplayConfig:
        """Build and validate; a bad value is one :class:`~ego2web_replay.errors.ReplayError` line."""
        from ..errors import ReplayError

        if "rules_files" in values:
            values["rules_files"] = tuple(str(p) for p in values["rules_files"] or ())
        try:
            return cls(**values)
        except ValueError as e:
            errors = getattr(e, "errors", None)
            if callable(errors):
                first = errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                msg = str(first["msg"]).removeprefix("Value error, ")
                raise ReplayError(f"replay configuration: {where}: {msg}") from None
            raise ReplayError(f"replay configuration: {e}") from None

    def rules_paths(self) -> list[Path]:
        return [Path(p) for p in self.rules_files]

    @property
    def hermetic(self) -> bool:
        """False when misses are forwarded to the live web."""
        return self.miss != "live"
