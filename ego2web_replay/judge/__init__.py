"""Judges: turn an episode (trajectory, screenshots, answer) and the task's video
evidence into a :class:`~ego2web_replay.models.Verdict`.

- :func:`make_judge` / :data:`JUDGES`: ``ego2web`` (Ego2WebJudge), ``webjudge`` and
  ``webvoyager`` (baselines), ``rule`` (offline), ``rubric`` (Mind2Web 2 trees);
- :func:`judge_run`: judge every episode of a run folder, verdicts written next to them;
- :class:`LLMClient`: the OpenAI-compatible client with its content-hash call cache;
- :func:`extract_keyframes`: video keyframes for the evidence time ranges;
- :func:`agreement`: a judge's agreement with human labels.
"""

from ..media.keyframes import Keyframe, KeyframeError, extract_keyframes
from .agreement import AgreementReport, AgreementStats, agreement, compute_stats, load_labels
from .cache import CallCache
from .client import EndpointError, Image, LLMClient, LLMConfig, Message, resolve_config
from .pages import DictPages, PageSource, SnapshotPages
from .registry import JUDGES, Judge, make_judge
from .rubric import Rubric, RubricResult, evaluate_rubric, load_rubric
from .run import judge_run, summarize
from .verdicts import read_verdict, verdict_path, write_verdict

__all__ = [
    "AgreementReport", "AgreementStats", "agreement", "compute_stats", "load_labels",
    "CallCache", "EndpointError", "Image", "LLMClient", "LLMConfig", "Message", "resolve_config",
    "Keyframe", "KeyframeError", "extract_keyframes",
    "DictPages", "PageSource", "SnapshotPages",
    "JUDGES", "Judge", "make_judge",
    "Rubric", "RubricResult", "evaluate_rubric", "load_rubric",
    "judge_run", "summarize",
    "read_verdict", "verdict_path", "write_verdict",
]
