"""Agreement of a judge with human labels (meta-evaluation).

Labels are a CSV file with a header: ``task_id,mode,label`` and optionally
``annotator``, ``agent`` and ``repeat``. ``label`` is ``success``/``failure``
(also ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``pass``/``fail``);
``mode`` is ``live`` or ``frozen``; ``agent`` (the agent name, ``name/model``,
or the run folder's name) picks the episode when several runs hold the same
task and mode; ``repeat`` (a whole number, default 0: the first repeat) picks
one repeat of a ``run --repeats K`` run. Several rows for one episode (several annotators) are reduced to
their majority; ties are left out and counted.

Reported per agent and overall: agreement rate, Cohen's kappa, the
confusion matrix (judge versus human, "positive" = success), false-positive
rate (judge says success where humans say failure) and false-negative rate,
each with a percentile bootstrap confidence interval.
"""

from __future__ import annotations

import csv
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

__all__ = ["HumanLabel", "AgreementStats", "AgreementReport", "load_labels", "compute_stats",
           "agreement", "agreement_table"]

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
        samples = _metrics(h[idx], j[idx])
        alpha = (1 - confidence) / 2
        for name, values in samples.items():
            values = values[~np.isnan(values)]
            ci[name] = None if not len(values) else [round(float(np.quantile(values, alpha)), 6),
                                                      round(float(np.quantile(values, 1 - alpha)), 6)]
    return AgreementStats(n=n, agreement=_num(point["agreement"]), kappa=_num(point["kappa"]),
                          tp=int((h & j).sum()), fp=int((~h & j).sum()), fn=int((h & ~j).sum()),
                          tn=int((~h & ~j).sum()), fpr=_num(point["fpr"]), fnr=_num(point["fnr"]), ci=ci)


class AgreementReport(BaseModel):
    version: int = 1
    judge: str
    runs: list[str]
    labels: str
    overall: AgreementStats
    per_agent: dict[str, AgreementStats]
    episodes: list[dict[str, Any]] = Field(default_factory=list, description="Each compared episode.")
    ties: int = Field(default=0, description="Episodes whose annotators split evenly (left out).")
    unmatched_labels: int = Field(default=0, description="Labelled episodes with no episode in the runs.")
    missing_verdicts: int = Field(default=0, description="Labelled episodes not judged by this judge.")
    judge_errors: int = Field(default=0, description="Labelled episodes whose verdict is an error (left out).")


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
    ties = unmatched = missing = errors = 0
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
        if verdict.error is not None:
            errors += 1
            continue
        pairs[agent_key].append((human, verdict.success))
        episodes.append({"task_id": task_id, "mode": mode, "repeat": repeat, "agent": agent_key, "human": human,
                         "judge": verdict.success, "annotators": len(vs)})
    if not episodes:
        raise JudgeError(f"{labels_path}: no labelled episode has a '{judge}' verdict in the runs given "
                         f"({unmatched} unmatched, {missing} not judged, {errors} judge errors, {ties} ties); "
                         f"run 'ego2web-replay judge RUN --judge {judge}' first")
    everything = [p for ps in pairs.values() for p in ps]
    report = AgreementReport(
        judge=judge, runs=[str(r) for r in run_dirs], labels=str(labels_path),
        overall=compute_stats(everything, bootstrap=bootstrap, seed=seed),
        per_agent={a: compute_stats(ps, bootstrap=bootstrap, seed=seed) for a, ps in sorted(pairs.items())},
        episodes=episodes, ties=ties, unmatched_labels=unmatched, missing_verdicts=missing, judge_errors=errors)
    if out is not None:
        save_model(Path(out), report)
    return report


def _fmt(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def agreement_table(report: AgreementReport) -> Table:
    """The report as a rich table: one row per agent and one overall."""
    table = Table(title=f"Agreement of judge '{report.judge}' with human labels (95% bootstrap CI)")
    for col in ("agent", "n", "agreement", "kappa", "TP", "FP", "FN", "TN", "FPR", "FNR"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    rows = list(report.per_agent.items()) + [("overall", report.overall)]
    for name, s in rows:
        table.add_row(name, str(s.n), _fmt(s.agreement, s.ci.get("agreement")), _fmt(s.kappa, s.ci.get("kappa")),
                      str(s.tp), str(s.fp), str(s.fn), str(s.tn), _fmt(s.fpr, s.ci.get("fpr")),
                      _fmt(s.fnr, s.ci.get("fnr")))
    return table
