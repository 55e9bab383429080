"""The offline rule judge: deterministic checks of the final answer and the final page.

Checks, each only when the task defines it:

- ``expected_answer``: the answer contains the expected answer (case, spacing
  and punctuation ignored), or holds every number the expected answer holds;
- ``answer_pattern``: each regex of ``answer_patterns`` is found in the answer;
- ``must_match``: each cue is found on the final page: its URL, its title and
  its visible text as rendered when the episode ended (recorded by the runner,
  or the last rendered capture of that URL a program agent kept); for
  trajectories without either, the archived page's text or the answer;
- ``url_pattern``: each regex of ``url_patterns`` is found in the final URL.

The verdict is a success when every check passes; its thoughts name the
checks that failed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import JudgeError
from ..models import JudgeSpec, Task, Verdict
from .episode import Episode, load_episode
from .pages import PageSource, SnapshotPages

__all__ = ["RuleJudge", "normalize_text", "answer_matches"]

_NUM = re.compile(r"-?\d+(?:[.,]\d+)*")


def normalize_text(text: str) -> str:
    """Lower case, punctuation to spaces (except inside numbers), whitespace collapsed."""
    text = text.lower()
    text = re.sub(r"(?<=\d)[,](?=\d{3}\b)", "", text)
    text = re.sub(r"[^\w.$€£%]+|(?<!\d)\.|\.(?!\d)", " ", text)
    return " ".join(text.split())


def _numbers(text: str) -> list[float]:
    out = []
    for n in _NUM.findall(text.replace(",", "")):
        try:
            out.append(float(n))
        except ValueError:
            pass
    return out


def answer_matches(expected: str, answer: str) -> bool:
    """True when ``answer`` contains ``expected`` (normalised), or holds every number of
    ``expected`` and every word of it that has letters (so ``$12.99`` matches ``12.99 dollars``)."""
    e, a = normalize_text(expected), normalize_text(answer)
    if e and f" {e} " in f" {a} ":
        return True
    want = _numbers(expected)
    if not want:
        return False
    have = _numbers(answer)
    if not all(any(abs(w - h) < 1e-9 for h in have) for w in want):
        return False
    words = a.split()
    return all(t in words for t in re.sub(r"-?\d[\d.,]*", " ", e).split() if re.search(r"[^\W\d_]", t))


class RuleJudge:
    """Deterministic; needs no endpoint. ``pages`` overrides the episode's archived pages."""

    def __init__(self, pages: PageSource | None = None) -> None:
        self.pages = pages
        self.spec = JudgeSpec(name="rule", prompt_version=None, settings={"version": 1})

    def _page_text(self, episode: Episode, url: str | None) -> tuple[str, str | None]:
        if url is None:
            return "", "no final URL"
        source = self.pages
        if source is None:
            dirs = episode.snapshot_dirs()
            if not dirs:
                return "", "no archived snapshot"
            source = SnapshotPages(dirs)
        try:
            text = source.get_text(url)
        except JudgeError as e:
            return "", str(e)
        return (text or ""), (None if text is not None else "final page not archived")

    def judge(self, episode_dir: Path, task: Task) -> Verdict:
        episode = load_episode(episode_dir)
        traj = episode.trajectory
        answer = traj.answer or ""
        final_url = traj.final_url
        title = next((s.title for s in reversed(traj.steps) if s.title), None) or ""
        checks: list[dict[str, Any]] = []
        if task.expected_answer is not None:
            ok = traj.answer is not None and answer_matches(task.expected_answer, answer)
            checks.append({"kind": "expected_answer", "expected": task.expected_answer, "passed": ok,
                           "detail": "answer matches" if ok else
                           ("no final answer" if traj.answer is None else f"answer {answer[:120]!r} does not contain it")})
        for pattern in task.answer_patterns:
            ok = re.search(pattern, answer, re.I) is not None
            checks.append({"kind": "answer_pattern", "pattern": pattern, "passed": ok,
                           "detail": "found in answer" if ok else "not found in answer"})
        if task.must_match:
            rendered = traj.final_page_text
            if rendered is None:  # a program agent's own captures (pages/step-NNN.json), the last one
                rendered = next((r.text for r in reversed(episode.renders()) if r.url == final_url), None)
            if rendered is not None:
                # the page as the agent saw it rendered: cues describe the result on the web page
                page, note = rendered, None
                haystack = normalize_text(" ".join([title, final_url or "", page]))
            else:
                page, note = self._page_text(episode, final_url)
                haystack = normalize_text(" ".join([answer, title, final_url or "", page]))
            for cue in task.must_match:
                ok = normalize_text(cue) in haystack
                detail = "found" if ok else "not found in the answer or on the final page"
                if note and not ok:
                    detail += f" ({note})"
                checks.append({"kind": "must_match", "cue": cue, "passed": ok, "detail": detail})
        for pattern in task.url_patterns:
            ok = final_url is not None and re.search(pattern, final_url) is not None
            checks.append({"kind": "url_pattern", "pattern": pattern, "url": final_url, "passed": ok,
                           "detail": "final URL matches" if ok else f"final URL {final_url!r} does not match"})
        if not checks:
            raise JudgeError(f"task {task.id!r} gives the rule judge nothing to check (expected_answer, "
                             "answer_patterns, must_match, url_patterns); add one or use an LLM judge")
        failed = [c for c in checks if not c["passed"]]
        if failed:
            thoughts = "failed: " + "; ".join(
                f"{c['kind']} {c.get('expected') or c.get('pattern') or c.get('cue')!r}: {c['detail']}" for c in failed)
        else:
            thoughts = f"all {len(checks)} checks passed"
        return Verdict(task_id=traj.task_id, mode=traj.mode, judge=self.spec, success=not failed,
                       score=1.0 if not failed else 0.0, thoughts=thoughts, checks=checks,
                       judged_at=datetime.now(UTC))
