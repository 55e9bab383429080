"""The fixed action vocabulary shared by reference actions, agents and trajectories."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Action", "ActionKind", "ACTION_KINDS"]

ActionKind = Literal["goto", "click", "type", "press", "scroll", "back", "wait", "answer", "stop"]
ACTION_KINDS: tuple[str, ...] = ("goto", "click", "type", "press", "scroll", "back", "wait", "answer", "stop")


class Action(BaseModel):
    """One browser action.

    ``goto`` needs ``url``; ``click`` needs ``selector``, ``text`` or both ``x`` and ``y``;
    ``type`` needs ``value`` (typed into ``selector`` if given, else the focused element);
    ``press`` needs ``key``; ``scroll`` uses ``dy`` (pixels, default 600) and ``dx``;
    ``wait`` uses ``seconds`` or waits for ``selector``/``text``; ``answer`` needs ``answer``;
    ``back`` and ``stop`` take nothing.
    """

    model_config = ConfigDict(extra="forbid")

    kind: ActionKind = Field(description="What to do.")
    url: str | None = Field(default=None, description="goto: the address to open.")
    selector: str | None = Field(default=None, description="CSS selector of the target element.")
    text: str | None = Field(default=None, description="click/wait: visible text of the target.")
    x: float | None = Field(default=None, description="click: page x coordinate (CSS pixels).")
    y: float | None = Field(default=None, description="click: page y coordinate (CSS pixels).")
    value: str | None = Field(default=None, description="type: the text to type.")
    key: str | None = Field(default=None, description="press: a Playwright key name, e.g. Enter.")
    dx: int = Field(default=0, description="scroll: horizontal pixels.")
    dy: int = Field(default=600, description="scroll: vertical pixels.")
    seconds: float | None = Field(default=None, description="wait: how long to wait.")
    answer: str | None = Field(default=None, description="answer: the final answer.")

    @model_validator(mode="after")
    def _check_arguments(self) -> Action:
        k = self.kind
        if k == "goto" and not self.url:
            raise ValueError("a goto action needs 'url'")
        if k == "click" and not (self.selector or self.text or (self.x is not None and self.y is not None)):
            raise ValueError("a click action needs 'selector', 'text' or both 'x' and 'y'")
        if k == "type" and self.value is None:
            raise ValueError("a type action needs 'value'")
        if k == "press" and not self.key:
            raise ValueError("a press action needs 'key'")
        if k == "answer" and self.answer is None:
            raise ValueError("an answer action needs 'answer'")
        return self

    def describe(self) -> str:
        """A short human-readable form, e.g. ``click text='Add to cart'``."""
        parts: list[str] = [self.kind]
        for name in ("url", "selector", "text", "value", "key", "answer"):
            v = getattr(self, name)
            if v is not None:
                parts.append(f"{name}={v!r}")
        if self.kind == "click" and self.x is not None:
            parts.append(f"at=({self.x:.0f},{self.y:.0f})")
        if self.kind == "scroll":
            parts.append(f"dy={self.dy}")
        if self.kind == "wait" and self.seconds is not None:
            parts.append(f"seconds={self.seconds}")
        return " ".join(parts)
