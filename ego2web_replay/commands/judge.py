"""``ego2web-replay judge``: judge a run's episodes, and measure a judge's agreement with humans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ._checks import PreflightError, check_endpoint, endpoint_url
from ._options import Finite, db_options, iterations_option, json_option
from ._output import bar_wanted, console, emit_json, emit_machine, is_stdout, table, warn
from .executor_options import ExecutorChoice, executor_options

#: The built-in judges, for help text only (``judge.registry.JUDGES`` is the truth; a test keeps them equal).
JUDGE_NAMES = ("ego2web", "webjudge", "webvoyager", "rule", "rubric")

__all__ = ["COMMANDS", "DefaultGroup"]


class DefaultGroup(click.Group):
    """A group that runs ``default_command`` when the first argument is not a subcommand,
    so ``judge RUN --judge rule`` means ``judge run RUN --judge rule``."""

    def __init__(self, *args: Any, default_command: str = "run", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.default_command = default_command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group("judge", cls=DefaultGroup, default_command="run")
def judge() -> None:
    """Judge the episodes of a run, or compare a judge with human labels.

    \b
    ego2web-replay judge runs/RUN --judge ego2web --model gpt-4o [--base-url URL]
    ego2web-replay judge runs/RUN --judge webjudge|webvoyager|rule|rubric
    ego2web-replay judge agreement runs/RUN --human labels.csv

    `judge RUN ...` is short for `judge run RUN ...`.
    """


@judge.command("run")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--judge", "judge_name", default="ego2web", show_default=True,
              help=f"Which judge: {', '.join(JUDGE_NAMES)}; or a plugin: an installed "
                   "'ego2web_replay.judges' entry point, or module:factory.")
@click.option("--model", help="Judge model (default: $EGO2WEB_JUDGE_MODEL).")
@click.option("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
                                 "(default: $OPENAI_BASE_URL). The key is read from $OPENAI_API_KEY.")
@click.option("--tasks", type=click.Path(path_type=Path),
              help="Task file of the run (default: suite_path in <run>/run.json).")
@click.option("--task", "task_ids", multiple=True, help="Judge only this task id (repeatable).")
@click.option("--workers", default=4, show_default=True, help="Episodes judged at once (and LLM calls in flight).")
@click.option("--threshold", type=click.IntRange(1, 5),
              help="ego2web/webjudge: the relevance threshold δ: every screenshot scored at least this is kept "
                   "(default 3).")
@click.option("--max-screenshots", type=click.IntRange(0),
              help="ego2web/webjudge: a cap on the screenshots kept, for a model's context: the highest-scored "
                   "are kept, ties by step (ego2web: no cap by default; webjudge: 8); rubric: most screenshots "
                   "of the cited pages sent with each verified claim (default 3).")
@click.option("--keyframes", "keyframes_per_range", type=click.IntRange(1),
              help="ego2web: keyframes per evidence range (default 3).")
@click.option("--keyframe-method", type=click.Choice(["even", "scene"]),
              help="ego2web: sample keyframes evenly or at scene changes (default even).")
@click.option("--keyframe-size", "keyframe_max_side", type=click.IntRange(16),
              help="ego2web: longest side of keyframes sent, in pixels (default 512).")
@click.option("--last-k", type=click.IntRange(0), help="webvoyager: last screenshots shown (default 3).")
@click.option("--votes", type=click.IntRange(1),
              help="rubric: samples asked per claim question, the majority decides (an odd number; default 3, "
                   "as in Mind2Web 2); each sample has its own seed and cache entry.")
@click.option("--temperature", type=click.FloatRange(0),
              help="LLM judges: sampling temperature (default 0; votes that should differ need more, e.g. 1).")
@click.option("--prompt-version", help="Packaged prompt version, e.g. v1.")
@click.option("--prompts-dir", type=click.Path(path_type=Path, file_okay=False),
              help="A folder of custom prompt files instead of the packaged ones.")
@click.option("--max-retries", type=click.IntRange(0),
              help="LLM judges: retries on 429, 5xx, timeouts and refused connections (default 4).")
@click.option("--timeout", "timeout_s", type=Finite(0, min_open=True),
              help="LLM judges: seconds to wait for one reply (default 120).")
@click.option("--cache-dir", type=click.Path(path_type=Path),
              help="LLM call cache (default: <run>/judge-cache).")
@db_options("each verdict as it is made")
@executor_options
@json_option("the verdicts, the summary per mode and the frozen coverage")
def run_cmd(run_dir: Path, judge_name: str, model: str | None, base_url: str | None, tasks: Path | None,
            task_ids: tuple[str, ...], workers: int, cache_dir: Path | None, db: Path | None,
            executor: ExecutorChoice, json_out: str | None, **options: Any) -> None:
    """Judge every episode of RUN_DIR and write <episode>/verdicts/<judge>.json.

    LLM judges (ego2web, webjudge, webvoyager) need an OpenAI-compatible
    endpoint; every call is cached so re-judging is free and reproducible.
    The rule judge is offline; the rubric judge needs an endpoint only for
    LLM-verified claims. With --executor ray each episode is judged as a task on a Ray
    cluster; the verdicts, the call cache and the database are written here as a local judge
    writes them. The progress bar goes to stderr, the verdicts table to stdout.
    """
    from ..judge.run import judge_run, summarize
    from ..tracking.validity import frozen_coverage

    settings = {k: v for k, v in options.items() if v is not None}
    _check_judge_endpoint(run_dir, judge_name, base_url, cache_dir)
    on_verdict = None
    if db is not None:
        from ..tracking.sink import TrackingSink

        errors = console(stderr=True)
        sink = TrackingSink(db, warn=lambda msg: warn(errors, msg))

        def on_verdict(episode: Path, verdict: Any) -> None:
            sink.verdict_made(episode, verdict)  # under the judge's own name, as its verdict file

    verdicts = judge_run(run_dir, judge_name, tasks=tasks, model=model, base_url=base_url, workers=workers,
                         progress=bar_wanted(), settings=settings, cache_dir=cache_dir,
                         task_ids=list(task_ids) or None, on_verdict=on_verdict,
                         executor=executor.make_judge_executor())
    coverage = frozen_coverage(run_dir, verdicts)
    summary = summarize(verdicts)
    emit_json(json_out, {"run_dir": str(run_dir), "judge": judge_name, "summary": summary, "coverage": coverage,
                         "verdicts": [{"task_id": v.task_id, "mode": v.mode, "repeat": v.repeat, "success": v.success,
                                       "score": v.score, "prompt_tokens": v.prompt_tokens,
                                       "completion_tokens": v.completion_tokens, "error": v.error,
                                       "episode_error": v.episode_error} for v in verdicts]})
    if not is_stdout(json_out):
        _print_verdicts(judge_name, run_dir, verdicts, summary, coverage)
    _raise_when_all_errored(verdicts)


def _print_verdicts(judge_name: str, run_dir: Path, verdicts: list[Any], summary: dict[str, dict[str, Any]],
                    coverage: dict[str, Any] | None) -> None:
    rows = table("task", "mode", "success", "score", "tokens", "error", title=f"{judge_name} verdicts: {run_dir}")
    for v in verdicts:
        # a verdict that could not be made (the episode could not run, the judge failed) is no failure
        unjudged = "not judged" if v.episode_error else "error" if v.error else None
        rows.add_row(v.task_id, v.mode + (f" r{v.repeat}" if v.repeat else ""),
                     unjudged or ("yes" if v.success else "no"), "–" if unjudged else f"{v.score:.2f}",
                     str(v.prompt_tokens + v.completion_tokens), v.error or "")
    console().print(rows)
    for mode, s in summary.items():
        rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.1%}"
        line = (f"{mode}: {s['success']}/{s['judged']} success ({rate}), "
                f"{s['errors']} error(s), "
                + (f"{s['episode_errors']} episode error(s) (could not run; not judged), " if s["episode_errors"] else "")
                + f"{s['prompt_tokens'] + s['completion_tokens']} tokens")
        if mode == "frozen" and coverage is not None:  # a frozen score is never shown without its coverage
            c = coverage
            on_complete = "n/a" if c["complete_success_rate"] is None else f"{c['complete_success_rate']:.1%}"
            line += (f"; coverage: {c['complete']}/{c['episodes']} complete, success over complete "
                     f"{c['complete_success']}/{c['complete_judged']} ({on_complete})")
        click.echo(line)


def _raise_when_all_errored(verdicts: list[Any]) -> None:
    if verdicts and all(v.error for v in verdicts):
        from ..errors import JudgeError

        unrun = sorted({v.episode_error for v in verdicts if v.episode_error})
        if unrun and all(v.episode_error for v in verdicts):
            raise JudgeError(f"no episode could be judged: every one could not run ({len(verdicts)}: "
                             f"{', '.join(unrun)}); first: {verdicts[0].error}")
        raise JudgeError(f"every verdict errored ({len(verdicts)}); first error: {verdicts[0].error}")


def _check_judge_endpoint(run_dir: Path, judge_name: str, base_url: str | None, cache_dir: Path | None) -> None:
    """Probe the endpoint of an LLM judge (or of the rubric judge given --base-url) before any episode.

    A dead endpoint stops here, unless the run's call cache holds answers: re-judging from the cache needs
    no endpoint, and a call the cache lacks still fails on its own, naming the endpoint."""
    from ..judge.registry import LLM_JUDGES

    url = endpoint_url(base_url) if judge_name in LLM_JUDGES else base_url if judge_name == "rubric" else None
    if not url:
        return
    try:
        check_endpoint(url, f"the {judge_name} judge's")
    except PreflightError as e:
        cache = cache_dir or run_dir / "judge-cache"
        if not (cache.is_dir() and any(cache.iterdir())):
            raise
        from ..judge.cache import CallCache

        made = CallCache(cache).endpoints()
        here = made.get(url.rstrip("/"), 0)
        if not here:  # its calls are keyed by the endpoint they were made at: none would be found
            elsewhere = ", ".join(f"{k} ({n})" for k, n in sorted(made.items()))
            raise PreflightError(f"{e}; the call cache in {cache} holds no call made at this endpoint (its calls "
                                 f"were made at: {elsewhere or 'none readable'}); give that --base-url to judge "
                                 "from it") from None
        warn(console(stderr=True), f"{e}; judging from the call cache in {cache} only ({here} calls made there)")


@judge.command("agreement")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--human", "labels", required=True, type=click.Path(path_type=Path),
              help="Labels CSV with header task_id,mode,label[,annotator,agent,repeat].")
@click.option("--judge", "judge_name", default="ego2web", show_default=True, help="Whose verdicts to compare.")
@iterations_option(1000, minimum=0, alias="--bootstrap")
@click.option("--seed", default=0, show_default=True, help="Seed of the bootstrap.")
@json_option("the report", default="<first run>/agreement-<judge>.json", alias="--out")
def agreement_cmd(run_dirs: tuple[Path, ...], labels: Path, judge_name: str, iterations: int, seed: int,
                  json_out: str | None) -> None:
    """Compare a judge's stored verdicts in RUN_DIRS with human labels.

    \b
    The labels CSV has a header and one row per label:
      task_id,mode,label[,annotator,agent,repeat]
    label is success/failure (or 1/0); mode is live or frozen; with several
    annotators per episode the majority counts (ties are left out); agent
    (agent name, name/model, or run folder name) picks the episode when
    several runs hold the same task; repeat (default 0) picks one repeat of a
    run --repeats K run. Reports, as the Ego2Web paper does, each agent's
    agreement, Cohen's kappa, confusion matrix, false-positive and
    false-negative rates, then their average over the agents (every agent
    weighs the same), then the pooled figures over all episodes (labelled so),
    each with a bootstrap confidence interval.
    """
    from ..judge.agreement import agreement, agreement_table

    target = json_out or str(run_dirs[0] / f"agreement-{judge_name}.json")
    report = agreement(list(run_dirs), labels, judge=judge_name, bootstrap=iterations, seed=seed)
    emit_machine(target, report.model_dump_json(indent=2) + "\n")
    if is_stdout(target):
        return
    console().print(agreement_table(report))
    click.echo(f"left out: {report.ties} tie(s), {report.unmatched_labels} unmatched label(s), "
               f"{report.missing_verdicts} not judged, {report.judge_errors} judge error(s), "
               f"{report.episode_errors} episode(s) that could not run")


COMMANDS = [judge]
