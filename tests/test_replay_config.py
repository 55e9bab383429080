"""One replay configuration: the same options on serve and run, validated once, recorded with results."""

from __future__ import annotations

import pytest

from ego2web_replay.cli import cli
from ego2web_replay.errors import ReplayError
from ego2web_replay.models import ReplayConfig, RunSettings


def _options(name: str) -> dict[str, str]:
    command = cli.commands[name]
    return {opt: p.help or "" for p in command.params for opt in getattr(p, "opts", []) if p.name.startswith("replay_")}


def test_serve_and_run_take_the_same_replay_options():
    serve, run = _options("serve"), _options("run")
    assert set(serve) == {"--rules", "--sequence", "--no-freeze", "--miss", "--fuzzy", "--fuzzy-threshold",
                          "--share-window", "--no-share", "--engine"}
    assert serve == run  # same names, same help


def test_config_validates_with_one_line_errors():
    assert ReplayConfig.make(miss=" 410 ").miss == "410"
    assert ReplayConfig.make(miss="LIVE").hermetic is False
    with pytest.raises(ReplayError, match="miss: unknown miss policy 'sometimes'"):
        ReplayConfig.make(miss="sometimes")
    with pytest.raises(ReplayError, match="fuzzy_threshold"):
        ReplayConfig.make(fuzzy_threshold=2)
    with pytest.raises(ReplayError, match="sequence"):
        ReplayConfig.make(sequence="random")
    assert ReplayConfig().share_window_s is None  # sharing is off unless asked for (the CLI asks: 24h)
    with pytest.raises(ReplayError, match="share_window_s"):
        ReplayConfig.make(share_window_s=0)


def test_the_fast_engine_is_the_default_and_live_misses_pick_mitmproxy():
    assert ReplayConfig().engine == "fast" and ReplayConfig.make(engine="mitmproxy").engine == "mitmproxy"
    assert ReplayConfig.make(miss="live").engine == "mitmproxy"  # only mitmproxy forwards upstream
    with pytest.raises(ReplayError, match="fast engine never does"):
        ReplayConfig.make(miss="live", engine="fast")
    with pytest.raises(ReplayError, match="engine"):
        ReplayConfig.make(engine="twisted")


def test_run_settings_carry_the_replay_config_through_json():
    settings = RunSettings(replay=ReplayConfig.make(miss="504", fuzzy=True, rules_files=["a.yaml"]))
    back = RunSettings.model_validate_json(settings.model_dump_json())
    assert back.replay == settings.replay and back.replay.rules_files == ("a.yaml",)
    old = RunSettings.model_validate({"mode": "frozen", "miss_policy": "404"})  # a run.json from before
    assert old.replay == ReplayConfig()
