"""Kept for old imports: the action model lives in :mod:`ego2web_replay.models.action`."""

from __future__ import annotations

from .models.action import ACTION_KINDS, Action, ActionKind

__all__ = ["Action", "ActionKind", "ACTION_KINDS"]
