"""Agreement of a judge with human labels (meta-evaluation).

Labels are a CSV file with a header: ``task_id,mode,label`` and optionally
``annotator``, ``agent`` and ``repeat``. ``label`` is ``success``/``failure``
(also ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``pass``/``fail``);
``mode`` is ``live`` or ``frozen``; ``agent`` (the agent name, ``name/model``,
or the run folder's name) picks the episode when several runs hold the same
task and mode; ``repeat`` (a whole number, default 0: the first repeat) picks
one repeat of a ``run --repeats K`` run. Several rows for one episode (several annotators) are reduced to
their majority; ties are left out and counted.

Reported as the Ego2Web paper reports its agreement rate: per agent first
(agreement rate, Cohen's kappa, the confusion matrix of judge versus human
with "positive" = success, false-positive rate: judge says success where
humans say failure, and false-negative rate), then the mean of each figure
over the agents (``average``: every agent weighs the same, however many of
its episodes are labelled). The figure over all labelled episodes together
is kept as ``pooled`` and labelled so; it weighs agents by their number of
episodes and is not the paper's figure. Every figure has a percentile
bootstrap confidence interval; the average's resamples each agent's
episodes separately.
"""

from __future__ import annotations

import csv
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field
from rich.table import Table

from ..errors import Ego2WebError, JudgeError
from ..models import load_trajectory, parse_episode_folder, save_model
from .run import find_episodes
from .verdicts import read_verdict

__all__ = ["HumanLabel", "AgreementStats", "AveragedStats", "AgreementReport", "load_labels", "compute_stats",
           "average_stats", "agreement", "agreement_table"]

_TRUE = {"success", "1", "true", "yes", "pass", "passed", "y"}
_FALSE = {"failure", "0", "false", "no", "fail", "failed", "n"}


class HumanLabel(BaseModel):
    task_id: str
    mode: str
    label: bool
    annotator: str | None = None
    agent: str | None = None
    repeat: int = 0
    line: int = 0


def load_labels(path: str | Path) -> list[HumanLabel]:
    """Read a labels CSV. Raises :class:`JudgeError` naming the file, line and problem."""
    p = Path(path)
    try:
        text = p.read_text("utf-8-sig")
    except FileNotFoundError:
        raise JudgeError(f"{p}: labels file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise JudgeError(f"{p}: cannot read labels file ({e})") from None
    reader = csv.DictReader(text.splitlines())
    columns = {(c or "").strip().lower() for c in (reader.fieldnames or [])}
    missing = [c for c in ("task_id", "mode", "label") if c not in columns]
    if missing:
        raise JudgeError(f"{p}: missing column(s) {', '.join(missing)}; expected a header "
                         "task_id,mode,label[,annotator,agent,repeat]")
    labels = []
    for n, row in enumerate(reader, 2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items() if k is not None}
        if not any(row.values()):
            continue
        raw = row.get("label", "").lower()
        if raw not in _TRUE | _FALSE:
            raise JudgeError(f"{p}: line {n}: label {row.get('label', '')!r} is not success/failure or 1/0")
        if row.get("mode") not in ("live", "frozen"):
            raise JudgeError(f"{p}: line {n}: mode {row.get('mode', '')!r} is not live or frozen")
        if not row.get("task_id"):
            raise JudgeError(f"{p}: line {n}: empty task_id")
        repeat = row.get("repeat") or "0"
        if not repeat.isdigit():
            raise JudgeError(f"{p}: line {n}: repeat {repeat!r} is not a whole number (0 is the first repeat)")
        labels.append(HumanLabel(task_id=row["task_id"], mode=row["mode"], label=raw in _TRUE,
                                 annotator=row.get("annotator") or None, agent=row.get("agent") or None,
                                 repeat=int(repeat), line=n))
    if not labels:
        raise JudgeError(f"{p}: no labels in file")
    return labels


class AgreementStats(BaseModel):
    n: int
    agreement: float | None
    kappa: float | None = Field(description="Cohen's kappa; None when undefined (chance agreement is 1).")
    tp: int = Field(description="judge success, human success")
    fp: int = Field(description="judge success, human failure")
    fn: int = Field(description="judge failure, human success")
    tn: int = Field(description="judge failure, human failure")
    fpr: float | None = Field(description="fp / (fp + tn)")
    fnr: float | None = Field(description="fn / (fn + tp)")
    ci: dict[str, list[float] | None] = Field(default_factory=dict, description="Bootstrap interval per metric.")


def _metrics(h: np.ndarray, j: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics over the last axis of boolean arrays (NaN where undefined)."""
    n = h.shape[-1]
    tp = (h & j).sum(-1).astype(float)
    tn = (~h & ~j).sum(-1).astype(float)
    fp = (~h & j).sum(-1).astype(float)
    fn = (h & ~j).sum(-1).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        po = (tp + tn) / n
        pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
        kappa = np.where(pe < 1, (po - pe) / (1 - pe), np.nan)
        fpr = np.where(fp + tn > 0, fp / (fp + tn), np.nan)
        fnr = np.where(fn + tp > 0, fn / (fn + tp), np.nan)
    return {"agreement": po, "kappa": kappa, "fpr": fpr, "fnr": fnr}


def _num(x: Any) -> float | None:
    v = float(x)
    return None if np.isnan(v) else round(v, 6)


def _interval(values: np.ndarray, confidence: float) -> list[float] | None:
    """The percentile interval of bootstrap values (NaN rounds left out); None when there are none."""
    values = values[~np.isnan(values)]
    if not len(values):
        return None
    alpha = (1 - confidence) / 2
    return [round(float(np.quantile(values, alpha)), 6), round(float(np.quantile(values, 1 - alpha)), 6)]


def compute_stats(pairs: list[tuple[bool, bool]], *, bootstrap: int = 1000, seed: int = 0,
                  confidence: float = 0.95) -> AgreementStats:
    """Statistics of (human, judge) pairs, with percentile bootstrap intervals."""
    n = len(pairs)
    if n == 0:
        return AgreementStats(n=0, agreement=None, kappa=None, tp=0, fp=0, fn=0, tn=0, fpr=None, fnr=None)
    h = np.array([p[0] for p in pairs], dtype=bool)
    j = np.array([p[1] for p in pairs], dtype=bool)
    point = _metrics(h, j)
    ci: dict[str, list[float] | None] = {}
    if bootstrap > 0:
        idx = np.random.default_rng(seed).integers(0, n, size=(bootstrap, n))
        ci = {name: _interval(values, confidence) for name, values in _metrics(h[idx], j[idx]).items()}
    return AgreementStats(n=n, agreement=_num(point["agreement"]), kappa=_num(point["kappa"]),
                          tp=int((h & j).sum()), fp=int((~h & j).sum()), fn=int((h & ~j).sum()),
                          tn=int((~h & ~j).sum()), fpr=_num(point["fpr"]), fnr=_num(point["fnr"]), ci=ci)


_RATES = ("agreement", "kappa", "fpr", "fnr")


class AveragedStats(BaseModel):
    """Per-agent figures averaged over the agents (the paper's "averaged across agents")."""

    agents: int = Field(description="Agents averaged over.")
    n: int = Field(description="Labelled episodes of those agents, all together.")
    agreement: float | None = Field(description="Mean of the agents' agreement rates.")
    kappa: float | None = Field(description="Mean of the agents' kappas, over the agents where it is defined.")
    fpr: float | None = Field(description="Mean false-positive rate, over the agents with a human failure.")
    fnr: float | None = Field(description="Mean false-negative rate, over the agents with a human success.")
    left_out: dict[str, int] = Field(default_factory=dict,
                                     description="Per figure, agents left out of its mean (undefined for them).")
    ci: dict[str, list[float] | None] = Field(default_factory=dict,
                                              description="Bootstrap interval per figure (agents resampled apart).")


def average_stats(groups: dict[str, list[tuple[bool, bool]]], *, bootstrap: int = 1000, seed: int = 0,
                  confidence: float = 0.95) -> AveragedStats:
    """The mean over agents of each agent's figures; each bootstrap round resamples every agent's own
    (human, judge) pairs and averages the agents' figures again."""
    groups = {a: ps for a, ps in groups.items() if ps}
    n = sum(len(ps) for ps in groups.values())
    if not groups:
        return AveragedStats(agents=0, n=0, agreement=None, kappa=None, fpr=None, fnr=None)
    arrays = [(np.array([p[0] for p in ps], dtype=bool), np.array([p[1] for p in ps], dtype=bool))
              for ps in groups.values()]
    per_agent = [_metrics(h, j) for h, j in arrays]
    point: dict[str, float | None] = {}
    left_out: dict[str, int] = {}
    for name in _RATES:
        values = np.array([float(m[name]) for m in per_agent])
        defined = values[~np.isnan(values)]
        point[name] = round(float(defined.mean()), 6) if len(defined) else None
        if len(defined) < len(values):
            left_out[name] = len(values) - len(defined)
    ci: dict[str, list[float] | None] = {}
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        rounds = []
        for h, j in arrays:
            idx = rng.integers(0, len(h), size=(bootstrap, len(h)))
            rounds.append(_metrics(h[idx], j[idx]))
        for name in _RATES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a round where no agent defines it: NaN
                means = np.nanmean(np.stack([r[name] for r in rounds]), axis=0)  # agents x rounds -> rounds
            ci[name] = _interval(means, confidence)
    return AveragedStats(agents=len(groups), n=n, left_out=left_out, ci=ci, **point)


class AgreementReport(BaseModel):
    version: int = 2
    judge: str
    runs: list[str]
    labels: str
    per_agent: dict[str, AgreementStats] = Field(description="Each agent's own figures (as the paper reports).")
    average: AveragedStats = Field(description="The per-agent figures averaged over the agents: the paper's "
                                               "agreement rate.")
    pooled: AgreementStats = Field(description="Every labelled episode together (agents weighed by their "
                                               "episodes); not the paper's figure.")
    episodes: list[dict[str, Any]] = Field(default_factory=list, description="Each compared episode.")
    ties: int = Field(default=0, description="Episodes whose annotators split evenly (left out).")
    unmatched_labels: int = Field(default=0, description="Labelled episodes with no episode in the runs.")
    missing_verdicts: int = Field(default=0, description="Labelled episodes not judged by this judge.")
    judge_errors: int = Field(default=0, description="Labelled episodes whose verdict is a judge error (left out).")
    episode_errors: int = Field(default=0, description="Labelled episodes that could not run (setup, infra or "
                                                       "browser error): not judged, left out, no judge error.")


def agreement(run_dirs: list[str | Path], labels_path: str | Path, *, judge: str = "ego2web",
              bootstrap: int = 1000, seed: int = 0, out: str | Path | None = None) -> AgreementReport:
    """Compare the stored verdicts of ``judge`` in ``run_dirs`` with human labels.

    The report is also written as JSON to ``out`` when given.
    """
    labels = load_labels(labels_path)
    index: dict[tuple[str, str, int], list[tuple[Path, str, str]]] = defaultdict(list)
    for run in map(Path, run_dirs):
        if not run.is_dir():
            raise JudgeError(f"{run}: run folder not found")
        for ep in find_episodes(run):
            try:
                traj = load_trajectory(ep)
                agent = traj.agent.name + (f"/{traj.agent.model}" if traj.agent.model else "")
            except Ego2WebError:
                agent = "unknown"
            mode, repeat = parse_episode_folder(ep.name) or (ep.name, 0)
            index[(ep.parent.name, mode, repeat)].append((ep, agent, run.name))
    votes: dict[tuple[str, str, int, str | None], list[bool]] = defaultdict(list)
    for lab in labels:
        votes[(lab.task_id, lab.mode, lab.repeat, lab.agent)].append(lab.label)
    pairs: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    episodes: list[dict[str, Any]] = []
    ties = unmatched = missing = errors = episode_errors = 0
    for (task_id, mode, repeat, wanted), vs in votes.items():
        count = Counter(vs)
        if count[True] == count[False]:
            ties += 1
            continue
        human = count[True] > count[False]
        found = [e for e in index.get((task_id, mode, repeat), []) if wanted is None or wanted in (e[1], e[2])]
        if not found:
            unmatched += 1
            continue
        if len(found) > 1:
            where = f"{task_id}/{mode}" + (f" repeat {repeat}" if repeat else "")
            raise JudgeError(f"{labels_path}: label for {where} matches episodes in several runs; "
                             "add an 'agent' column (agent name or run folder name)")
        ep, agent_key, _ = found[0]
        verdict = read_verdict(ep, judge)
        if verdict is None:
            missing += 1
            continue
        if verdict.episode_error is not None:
            episode_errors += 1
            continue
        if verdict.error is not None:
            errors += 1
            continue
        pairs[agent_key].append((human, verdict.success))
        episodes.append({"task_id": task_id, "mode": mode, "repeat": repeat, "agent": agent_key, "human": human,
                         "judge": verdict.success, "annotators": len(vs)})
    if not episodes:
        raise JudgeError(f"{labels_path}: no labelled episode has a '{judge}' verdict in the runs given "
                         f"({unmatched} unmatched, {missing} not judged, {errors} judge errors, "
                         f"{episode_errors} episodes that could not run, {ties} ties); "
                         f"run 'ego2web-replay judge RUN --judge {judge}' first")
    everything = [p for ps in pairs.values() for p in ps]
    by_agent = dict(sorted(pairs.items()))
    report = AgreementReport(
        judge=judge, runs=[str(r) for r in run_dirs], labels=str(labels_path),
        per_agent={a: compute_stats(ps, bootstrap=bootstrap, seed=seed) for a, ps in by_agent.items()},
        average=average_stats(by_agent, bootstrap=bootstrap, seed=seed),
        pooled=compute_stats(everything, bootstrap=bootstrap, seed=seed),
        episodes=episodes, ties=ties, unmatched_labels=unmatched, missing_verdicts=missing, judge_errors=errors,
        episode_errors=episode_errors)
    if out is not None:
        save_model(Path(out), report)
    return report


def _fmt(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _row(table: Table, name: str, s: AgreementStats) -> None:
    table.add_row(name, str(s.n), _fmt(s.agreement, s.ci.get("agreement")), _fmt(s.kappa, s.ci.get("kappa")),
                  str(s.tp), str(s.fp), str(s.fn), str(s.tn), _fmt(s.fpr, s.ci.get("fpr")), _fmt(s.fnr, s.ci.get("fnr")))


def agreement_table(report: AgreementReport) -> Table:
    """The report as a rich table: one row per agent, their average (the paper's figure), then the pooled row."""
    table = Table(title=f"Agreement of judge '{report.judge}' with human labels (95% bootstrap CI)")
    for col in ("agent", "n", "agreement", "kappa", "TP", "FP", "FN", "TN", "FPR", "FNR"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for name, s in report.per_agent.items():
        _row(table, name, s)
    a = report.average

    def mean(name: str) -> str:
        value, fewer = getattr(a, name), a.left_out.get(name)
        return _fmt(value, a.ci.get(name)) + (f" ({a.agents - fewer} agents)" if fewer and value is not None else "")

    table.add_row(f"average over {a.agents} agent(s)", str(a.n), mean("agreement"), mean("kappa"), "", "", "", "",
                  mean("fpr"), mean("fnr"))
    _row(table, "pooled (all episodes)", report.pooled)
    return table
