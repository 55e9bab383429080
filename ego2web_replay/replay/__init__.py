"""Hermetic replay: request matching, determinism (clock/random freeze), HTTP helpers.

* :mod:`.matching`: which archived capture answers a request (exact, canonical,
  fuzzy, miss) and in which order repeated requests are served;
* :mod:`.canonical`: the one documented match key (:func:`match_key`) and the
  pywb POST form of request bodies (:func:`body_form`, one implementation in
  :mod:`ego2web_replay.snapshots.postform`);
* :mod:`.rules`: volatile parameters and fields per host (``rules.yaml``);
* :mod:`.freeze`: the page-clock and randomness freeze script and its HTML injection;
* :mod:`.httputil`: conditional requests, CORS preflights, miss responses;
* :mod:`.ranges`: byte ranges answered from the recorded bytes of a URL (its byte map), else a miss;
* :mod:`.responder`: what a request is answered with (both engines call it);
* :mod:`.front` (with :mod:`.certs`, :mod:`.h1`, :mod:`.h2conn`): the fast asyncio engine, the default;
* :mod:`.addon`: the mitmproxy replay addon (``engine="mitmproxy"``);
* :mod:`.session`: :class:`Replay`, the Python API (and what ``serve`` runs);
* :mod:`.mapped`: matching over sorted, memory-mapped index files (large snapshots). Importing this
  package registers its canonical-key build with the snapshots layer, so an index built in a
  process that uses replay (every command, the runner, the probe) gets those keys at once.
"""

from __future__ import annotations

from .canonical import body_form, match_key
from .mapped import install_index_hook
from .matching import MATCH_STAGES, Capture, MatchIndex, MatchResult, ReplaySession, describe_key
from .rules import MatchRules, load_rules
from .session import Replay, ReplayConfig, replay_addons

__all__ = [
    "MATCH_STAGES",
    "Capture",
    "MatchIndex",
    "MatchResult",
    "MatchRules",
    "Replay",
    "ReplayConfig",
    "ReplaySession",
    "replay_addons",
    "describe_key",
    "load_rules",
    "match_key",
    "body_form",
]

install_index_hook()
