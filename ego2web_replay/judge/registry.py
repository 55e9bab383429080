"""The Judge protocol, the judge factories and the registry that names them.

``make_judge(name, **settings)`` builds a judge; every setting that affects
its verdicts is recorded in its :class:`JudgeSpec`. LLM judges take the
client settings (``model``, ``base_url``, ``cache_dir``, ``timeout_s``,
``max_retries``, ``backoff_s``, ``concurrency`` ...) and their own
(``threshold``, ``max_screenshots``, ``last_k``, ``prompt_version``,
``prompts_dir`` ...); an unknown setting is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import JudgeError
from ..models import JudgeSpec, Task, Verdict
from ..plugins import JUDGE_GROUP, PluginError, build, find_factory, plugin_names
from .claims import RUBRIC_VOTES, check_votes
from .client import LLMClient, LLMConfig, resolve_config
from .ego2web import PipelineJudge
from .episode import load_episode
from .pages import ChainPages, EpisodePages, PageSource, SnapshotPages
from .prompts import load_prompts
from .rubric import RUBRIC_MAX_SCREENSHOTS, RubricContext, evaluate_rubric, load_rubric
from .rule import RuleJudge
from .verdicts import CallLog
from .webvoyager import WebVoyagerJudge

__all__ = ["Judge", "JUDGES", "LLM_JUDGES", "make_judge", "RubricJudge"]


@runtime_checkable
class Judge(Protocol):
    """Turns one episode into a verdict."""

    spec: JudgeSpec

    def judge(self, episode_dir: Path, task: Task) -> Verdict: ...


_CLIENT_KEYS = set(LLMConfig.model_fields) - {"model", "base_url"}


def _split(name: str, settings: dict[str, Any], own: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    unknown = set(settings) - own - _CLIENT_KEYS - {"model", "base_url"}
    if unknown:
        raise JudgeError(f"unknown setting {', '.join(sorted(unknown))} for judge {name!r}; known: "
                         f"{', '.join(sorted(own | _CLIENT_KEYS | {'model', 'base_url'}))}")
    client = {k: v for k, v in settings.items() if k in _CLIENT_KEYS}
    return client, {k: v for k, v in settings.items() if k in own}


def _client(settings: dict[str, Any], client_settings: dict[str, Any]) -> LLMClient:
    return LLMClient(resolve_config(settings.get("model"), settings.get("base_url"), **client_settings))


# ego2web-v3: the paper's judge point by point (docs/judging.md has the table); v2 and v1 stay for their verdicts
DEFAULT_PROMPTS = {"ego2web": "v3"}
# Ego2WebJudge keeps every screenshot at or above δ, as the paper does; the WebJudge-style baseline keeps its cap
DEFAULT_MAX_SCREENSHOTS = {"webjudge": 8}

_PIPELINE = {"threshold", "max_screenshots", "keyframes_per_range", "keyframe_method", "keyframe_max_side",
             "reference_key_points", "prompt_version", "prompts_dir"}


def _pipeline(name: str, use_video: bool) -> Callable[..., Judge]:
    def factory(**settings: Any) -> Judge:
        client_settings, own = _split(name, settings, _PIPELINE if use_video else
                                      _PIPELINE - {"keyframes_per_range", "keyframe_method", "keyframe_max_side"})
        prompts = load_prompts(name, own.pop("prompt_version", DEFAULT_PROMPTS.get(name, "v1")),
                               own.pop("prompts_dir", None))
        own.setdefault("max_screenshots", DEFAULT_MAX_SCREENSHOTS.get(name))
        return PipelineJudge(name, _client(settings, client_settings), prompts, use_video=use_video, **own)

    factory.__doc__ = ("Ego2WebJudge: key points, screenshot filtering, strict verdict with video keyframes."
                       if use_video else "WebJudge-style: key points and screenshot filtering, no video.")
    return factory


def webvoyager_judge(**settings: Any) -> Judge:
    """WebVoyager-style: the answer and the last k screenshots."""
    client_settings, own = _split("webvoyager", settings, {"last_k", "prompt_version", "prompts_dir"})
    prompts = load_prompts("webvoyager", own.pop("prompt_version", "v1"), own.pop("prompts_dir", None))
    return WebVoyagerJudge(_client(settings, client_settings), prompts, **own)


def rule_judge(**settings: Any) -> Judge:
    """Offline rule judge: expected answer, must-match cues, URL patterns."""
    _, own = _split("rule", {k: v for k, v in settings.items() if k not in _CLIENT_KEYS | {"model", "base_url"}},
                    {"pages"})
    return RuleJudge(**own)


class RubricJudge:
    """Mind2Web 2 rubric trees; needs an endpoint only for rubrics with LLM-verified claims.

    Pages are read as the episode rendered them; ``pages`` (a :class:`PageSource`) replaces the episode's
    archive, which is read only for pages the episode never rendered."""

    def __init__(self, client: LLMClient | None, *, pages: PageSource | None = None,
                 prompt_version: str = "v3", prompts_dir: str | Path | None = None,
                 max_screenshots: int = RUBRIC_MAX_SCREENSHOTS, votes: int = RUBRIC_VOTES) -> None:
        if max_screenshots < 0:
            raise JudgeError(f"max_screenshots must be 0 or more, not {max_screenshots}")
        self.client = client
        self.pages = pages
        self.max_screenshots = max_screenshots
        self.votes = check_votes(votes)
        self.prompts = load_prompts("rubric", prompt_version, prompts_dir)
        self.spec = JudgeSpec(name="rubric", prompt_version=self.prompts.version,
                              model=client.config.model if client else None,
                              base_url=client.config.base_url if client else None,
                              settings={"max_screenshots": max_screenshots, "votes": votes, "pages": "rendered"})

    def judge(self, episode_dir: Path, task: Task) -> Verdict:
        episode = load_episode(episode_dir)
        if task.rubric is None:
            raise JudgeError(f"task {task.id!r} has no rubric; add a 'rubric' (inline or a JSON/YAML file) "
                             "or use another judge")
        rubric = load_rubric(task.rubric)
        archive = self.pages if self.pages is not None else ChainPages(
            [SnapshotPages([d]) for d in episode.snapshot_dirs()])
        traj = episode.trajectory
        visited = [s.url for s in traj.steps if s.url]
        pages = EpisodePages([(r.step, r.url, r.text) for r in episode.renders()], archive, visited)
        shots = {s.url: s.path for s in episode.screenshots if s.url}  # the last screenshot of each page
        ctx = RubricContext(traj.answer, visited, pages, self.client, self.prompts, screenshots=shots,
                            max_screenshots=self.max_screenshots, votes=self.votes)
        result = evaluate_rubric(rubric, ctx)
        log = CallLog()
        if ctx.extraction is not None:
            log.add(ctx.extraction)
        for node in rubric.root.walk():
            for call in ctx.results.get(node.id, []):
                log.add(call)
        checks: list[dict[str, Any]] = [
            {"kind": "rubric_node", "id": r.id, "depth": depth, "critical": r.critical, "status": r.status,
             "score": r.score, "passed": r.passed, "detail": r.detail} for depth, r in result.root.walk()]
        checks.append({"kind": "rubric_summary", "score": result.score, "success": result.success,
                       "llm_calls": result.llm_calls, "skipped_llm_calls": result.skipped_llm_calls,
                       "skipped_nodes": result.skipped_nodes, "extractor_calls": result.extractor_calls,
                       "verification_calls": result.verification_calls,
                       "pages_rendered": sum(1 for p in ctx.page_reads if p["origin"] == "rendered"),
                       "pages_archived": sum(1 for p in ctx.page_reads if p["origin"] == "archived")})
        if ctx.page_reads:  # which text every page check read: rendered, or archived and why
            checks.append({"kind": "rubric_pages", "pages": ctx.page_reads})
        if ctx.extraction is not None:
            checks.append({"kind": "rubric_extraction",
                           "claims": [c.model_dump() for c in ctx.extraction.parsed.claims]})
        failed = [r.id for _, r in result.root.walk() if r.status == "failed" and not r.children]
        thoughts = (f"rubric score {result.score:.3f} ({'success' if result.success else 'not complete'}); "
                    + (f"failed checks: {', '.join(failed)}" if failed else "every check passed"))
        return Verdict(task_id=traj.task_id, mode=traj.mode, judge=self.spec, success=result.success,
                       score=max(0.0, min(1.0, result.score)), thoughts=thoughts, checks=checks,
                       judged_at=datetime.now(UTC), **log.fields())


def rubric_judge(**settings: Any) -> Judge:
    """Mind2Web 2 rubric trees with partial credit."""
    client_settings, own = _split("rubric", settings, {"pages", "prompt_version", "prompts_dir", "max_screenshots",
                                                       "votes"})
    try:
        client: LLMClient | None = _client(settings, client_settings)
    except JudgeError:
        client = None  # deterministic rubrics need no endpoint; a claim reached without one is an error
    return RubricJudge(client, **own)


JUDGES: dict[str, Callable[..., Judge]] = {
    "ego2web": _pipeline("ego2web", use_video=True),
    "webjudge": _pipeline("webjudge", use_video=False),
    "webvoyager": webvoyager_judge,
    "rule": rule_judge,
    "rubric": rubric_judge,
}
LLM_JUDGES = frozenset({"ego2web", "webjudge", "webvoyager"})


def make_judge(name: str, **settings: Any) -> Judge:
    """Build the judge ``name`` with ``settings``: a built-in (:data:`JUDGES`), the name of an
    ``ego2web_replay.judges`` entry point, or ``module:factory``. A plugin factory is called with
    the settings that are not None (``model``, ``base_url``, ``cache_dir``, ``concurrency`` and the
    judge's own); its spec records the plugin and those settings. Unknown names raise JudgeError
    listing the known ones."""
    factory = JUDGES.get(name)
    if factory is not None:
        return factory(**settings)
    try:
        plugin = find_factory(name, JUDGE_GROUP, "judge")
        if plugin is not None:
            judge = build(plugin, name, {k: v for k, v in settings.items() if v is not None}, kind="judge")
            if not isinstance(judge, Judge):
                raise JudgeError(f"judge {name!r} built a {type(judge).__name__}, which has no judge(episode_dir, task)")
            return judge  # type: ignore[no-any-return]
    except PluginError as e:
        raise JudgeError(str(e)) from None
    installed = plugin_names(JUDGE_GROUP)
    raise JudgeError(f"unknown judge {name!r}; known judges: {', '.join(JUDGES)}"
                     + (f"; installed plugins: {', '.join(installed)}" if installed else "")
                     + "; or name a factory as module:function")
