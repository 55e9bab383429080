"""Loading and resolving the matching rules (replay/rules.yaml and user files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ego2web_replay.errors import ReplayError
from ego2web_replay.replay.rules import (
    PARAM_CALLBACK,
    PARAM_DROP,
    PARAM_KEEP,
    PARAM_PLAIN,
    PARAM_TIMESTAMP,
    default_rules,
    load_rules,
)


def test_builtin_rules_load_and_resolve_per_host():
    rules = default_rules()
    plain = rules.for_host("example.org")
    assert plain.param_class("utm_campaign") == PARAM_DROP
    assert plain.param_class("jsessionid") == PARAM_DROP
    assert plain.param_class("callback") == PARAM_CALLBACK
    assert plain.param_class("ts") == PARAM_TIMESTAMP
    assert plain.param_class("v") == PARAM_PLAIN
    assert plain.param_class("ved") == PARAM_PLAIN
    google = rules.for_host("www.google.com")
    assert google.param_class("ved") == PARAM_DROP
    assert google.param_class("utm_source") == PARAM_DROP  # defaults still apply
    assert rules.for_host("notgoogle.com").param_class("ved") == PARAM_PLAIN  # suffix on a label boundary
    assert rules.for_host("m.youtube.com").fuzzy_threshold == 0.6
    assert plain.fuzzy_threshold == 0.5


def test_epoch_window():
    rules = default_rules().for_host("example.org")
    assert rules.is_epoch("1712345678")  # 2024, seconds
    assert rules.is_epoch("1712345678901")  # 2024, milliseconds
    assert not rules.is_epoch("0000000001")
    assert not rules.is_epoch("9999999999")  # 2286
    assert not rules.is_epoch("12345")
    assert not rules.is_epoch("17123456789")  # 11 digits


def test_extra_files_extend_and_override(tmp_path: Path):
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "defaults:\n  volatile_params: [session_nonce]\n  fuzzy_threshold: 0.8\n"
        "hosts:\n  shop.example:\n    keep_params: [ts]\n    volatile_fields: [cartToken]\n    fuzzy_threshold: 0.3\n",
        encoding="utf-8",
    )
    rules = load_rules([extra])
    other = rules.for_host("elsewhere.example")
    assert other.param_class("session_nonce") == PARAM_DROP
    assert other.param_class("utm_source") == PARAM_DROP  # built-ins kept
    assert other.fuzzy_threshold == 0.8
    shop = rules.for_host("www.shop.example")
    assert shop.param_class("ts") == PARAM_KEEP
    assert shop.field_class("carttoken") == PARAM_DROP
    assert shop.fuzzy_threshold == 0.3


def test_bad_rules_files_raise_replay_error(tmp_path: Path):
    with pytest.raises(ReplayError, match="cannot read rules file"):
        load_rules([tmp_path / "absent.yaml"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: [1, 2\n", encoding="utf-8")
    with pytest.raises(ReplayError, match="not valid YAML"):
        load_rules([bad])
    typo = tmp_path / "typo.yaml"
    typo.write_text("defaults:\n  volatile_parms: [x]\n", encoding="utf-8")
    with pytest.raises(ReplayError, match="volatile_parms"):
        load_rules([typo])
    threshold = tmp_path / "threshold.yaml"
    threshold.write_text("hosts:\n  a.com:\n    fuzzy_threshold: 3\n", encoding="utf-8")
    with pytest.raises(ReplayError, match="fuzzy_threshold"):
        load_rules([threshold])
