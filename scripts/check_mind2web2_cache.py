#!/usr/bin/env python3
"""Read a `runs export --format mind2web2-cache` folder with Mind2Web 2's own code, from a checkout of it.

    python scripts/check_mind2web2_cache.py MIND2WEB2_SRC EXPORT [--json FILE]
    python scripts/check_mind2web2_cache.py MIND2WEB2_SRC EXPORT --evaluate CLAIM [--control CLAIM]

MIND2WEB2_SRC is a checkout of github.com/OSU-NLP-Group/Mind2Web-2 (their
package is not on PyPI). Run this with a Python that has what the code used
needs, never ego2web-replay: the check loads only their
``mind2web2/utils/cache_filesys.py`` (and the ``url_tools.py`` it imports:
Pillow, validators, pydantic), without their package's ``__init__``; it opens
each task's cache with their ``CacheFileSys`` and, for every page the export
lists, looks the page up under the URL the agent saw and under variants of it
(trailing slash, fragment), and compares what their class returns with the
episode's own files: the rendered text byte for byte, the screenshot pixel by
pixel (JPEG against the step's PNG).

``--evaluate CLAIM`` also runs their evaluator end to end on each task: their
``eval_runner.evaluate_task`` with an evaluation script written here in their
format (extract the cited URL from the answer, verify CLAIM against that URL
with ``Evaluator.verify``), their OpenAI client (``LLMClient``, as their ``run_eval.py`` makes it) pointed at OPENAI_BASE_URL (a
local OpenAI-compatible server; nothing leaves the machine). It needs their
package installed (``pip install MIND2WEB2_SRC`` in a venv of its own).
``--control CLAIM`` adds an answer file making that claim with the same URL,
which a judge reading the cached page must score otherwise. The scores and
whether each cited page came from the cache are printed and written to --json.
Exit status 0 when every lookup matched (and, with --evaluate, every task was
scored with no live capture).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any


def load_cache_class(src: Path) -> Any:
    """Their ``CacheFileSys``: from their installed package when there is one, else from the checkout without
    running their package ``__init__`` (which imports the whole evaluator and its dependencies)."""
    if importlib.util.find_spec("mind2web2") is None:
        for name, folder in (("mind2web2", src / "mind2web2"), ("mind2web2.utils", src / "mind2web2" / "utils")):
            if name not in sys.modules:
                pkg = types.ModuleType(name)
                pkg.__path__ = [str(folder)]
                sys.modules[name] = pkg
    return importlib.import_module("mind2web2.utils.cache_filesys").CacheFileSys


def _variants(url: str) -> list[str]:
    """The URL as the agent saw it, and as an answer may cite it: with or without a trailing slash, a fragment."""
    bare = url[:-1] if url.endswith("/") else url
    return list(dict.fromkeys([url, bare, bare + "/", bare + "#top", bare + "/#top"]))


def _pixels_differ(jpeg: bytes, png: Path) -> float | None:
    """Mean absolute difference per channel (0-255) of two images of one size; None when sizes differ."""
    import io

    from PIL import Image, ImageChops, ImageStat

    a = Image.open(io.BytesIO(jpeg)).convert("RGB")
    b = Image.open(png).convert("RGB")
    if a.size != b.size:
        return None
    return sum(ImageStat.Stat(ImageChops.difference(a, b)).mean) / 3


def check_cache(src: Path, export: Path) -> dict[str, Any]:
    cache_cls = load_cache_class(src)
    summary = json.loads((export / "ego2web-export.json").read_text("utf-8"))
    run = Path(summary["run"])
    checked: list[dict[str, Any]] = []
    mismatches: list[str] = []
    pages = 0
    for task in summary["tasks"]:
        cache = cache_cls(str(export / "cache" / summary["agent_name"] / task["task"]))
        kept = cache.summary()["web_pages"]
        pages += kept
        if kept != len(task["cached"]):
            mismatches.append(f"{task['task']}: their loader kept {kept} of {len(task['cached'])} pages")
        for page in task["cached"]:
            episode = run / page["episode"]
            capture = json.loads((episode / f"pages/step-{page['text_step']:03d}.json").read_text("utf-8"))
            traj = json.loads((episode / "trajectory.json").read_text("utf-8"))
            shot = next(s["screenshot"] for s in traj["steps"] if s["index"] == page["screenshot_step"])
            for lookup in _variants(page["url"]):
                row: dict[str, Any] = {"task": task["task"], "lookup": lookup, "stored": cache._find_url(lookup)}
                if not cache.has_web(lookup):
                    mismatches.append(f"{task['task']}: {lookup} not found by their lookup")
                    row["found"] = False
                    checked.append(row)
                    continue
                text, jpeg = cache.get_web(lookup)
                diff = _pixels_differ(jpeg, episode / shot)
                row.update(found=True, text_equal=text == capture["text"], pixel_diff=diff)
                if text != capture["text"]:
                    mismatches.append(f"{task['task']}: {lookup}: text differs from step {page['text_step']}")
                if diff is None or diff > 3.0:
                    mismatches.append(f"{task['task']}: {lookup}: screenshot differs from {shot} ({diff})")
                checked.append(row)
    return {"export": str(export), "pages": pages, "checked": checked, "mismatches": mismatches}


EVAL_SCRIPT = '''
from typing import Optional

from pydantic import BaseModel

from mind2web2.evaluator import Evaluator
from mind2web2.verification_tree import AggregationStrategy

TASK_ID = {task_id!r}
TASK_DESCRIPTION = {instruction!r}
CLAIM = {claim!r}


class CitedUrl(BaseModel):
    url: Optional[str] = None


async def evaluate_answer(client, answer, agent_name, answer_name, cache, semaphore, logger, model="o4-mini"):
    evaluator = Evaluator()
    evaluator.initialize(task_id=TASK_ID, strategy=AggregationStrategy.SEQUENTIAL, agent_name=agent_name,
                         answer_name=answer_name, client=client, task_description=TASK_DESCRIPTION, answer=answer,
                         global_cache=cache, global_semaphore=semaphore, logger=logger, default_model=model)
    cited = await evaluator.extract(prompt="Extract the URL the answer cites as its source.",
                                    template_class=CitedUrl, extraction_name="cited_url")
    evaluator.add_custom_node(result=bool(cited.url), id="url_cited", desc="The answer cites a URL",
                              parent=evaluator.root, critical=True)
    leaf = evaluator.add_leaf(id="claim_supported", desc=CLAIM, parent=evaluator.root, critical=True)
    await evaluator.verify(claim=answer, node=leaf, sources=cited.url,
                           additional_instruction="Check the answer against the page.")
    return evaluator.get_summary()
'''


async def _evaluate(src: Path, export: Path, claim: str, control: str | None, work: Path) -> dict[str, Any]:
    from mind2web2.eval_runner import evaluate_task
    from mind2web2.llm_client.base_client import LLMClient

    summary = json.loads((export / "ego2web-export.json").read_text("utf-8"))
    agent = summary["agent_name"]
    answers = work / "answers"
    shutil.copytree(export / "answers", answers)
    cache_root = work / "cache"
    shutil.copytree(export / "cache", cache_root)
    results: dict[str, Any] = {}
    for task in summary["tasks"]:
        task_id = task["task"]
        if control is not None and task["cached"]:
            url = max(task["cached"], key=lambda p: p["text_step"])["url"]
            (answers / agent / task_id / "answer_control.md").write_text(f"{control} (source: {url})", "utf-8")
        script = work / "eval_scripts" / f"{task_id}.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(EVAL_SCRIPT.format(task_id=task_id, instruction=f"Task {task_id}", claim=claim), "utf-8")
        got = await evaluate_task(client=LLMClient(provider="openai", is_async=True), task_id=task_id, agent_name=agent,
                                  answer_dir=answers, cache_dir=cache_root, output_dir=work / "results",
                                  script_path=script)
        results[task_id] = {r["answer_name"]: r.get("final_score") for r in got if isinstance(r, dict)}
        logs = "".join(p.read_text("utf-8", errors="replace") for p in (work / "results").rglob("*.log")) \
            if (work / "results").is_dir() else ""
        results[task_id + ":live_captures"] = logs.count("falling back to live capture")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path, help="a checkout of github.com/OSU-NLP-Group/Mind2Web-2")
    p.add_argument("export", type=Path, help="a folder written by `runs export --format mind2web2-cache`")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON to this file")
    p.add_argument("--evaluate", metavar="CLAIM", default=None,
                   help="also run their evaluator on every task, verifying CLAIM against the cited page")
    p.add_argument("--control", metavar="CLAIM", default=None,
                   help="with --evaluate: add an answer making this claim with the same URL")
    p.add_argument("--work", type=Path, default=None,
                   help="with --evaluate: keep their results and logs in this new folder (default: a temporary one)")
    args = p.parse_args(argv)
    if not (args.src / "mind2web2" / "utils" / "cache_filesys.py").is_file():
        print(f"error: {args.src} is not a Mind2Web 2 checkout (no mind2web2/utils/cache_filesys.py)",
              file=sys.stderr)
        return 2
    if not (args.export / "ego2web-export.json").is_file():
        print(f"error: {args.export} is not a mind2web2-cache export (no ego2web-export.json)", file=sys.stderr)
        return 2
    report = check_cache(args.src, args.export)
    for row in report["checked"]:
        state = "ok" if row.get("found") and row.get("text_equal") and (row.get("pixel_diff") or 0) <= 3.0 else "BAD"
        print(f"{state:3} {row['task']}  {row['lookup']}  -> {row['stored']}  pixel diff {row.get('pixel_diff')}")
    ok = not report["mismatches"]
    if args.evaluate is not None:
        with tempfile.TemporaryDirectory(prefix="m2w-eval-") as tmp:
            work = args.work or Path(tmp)
            report["evaluation"] = asyncio.run(_evaluate(args.src, args.export, args.evaluate, args.control, work))
        print("evaluation:", json.dumps(report["evaluation"], indent=2))
        ok = ok and not any(v for k, v in report["evaluation"].items() if k.endswith(":live_captures"))
    for m in report["mismatches"]:
        print("mismatch:", m)
    print(f"{report['pages']} page(s) read back by their CacheFileSys, {len(report['mismatches'])} mismatch(es)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
