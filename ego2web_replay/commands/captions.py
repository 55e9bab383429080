"""``ego2web-replay captions``: timestamped captions of each task's video, for the ``captions`` modality."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ._checks import check_endpoint
from ._options import Finite


@click.command("captions")
@click.argument("tasks_file", type=click.Path(path_type=Path))
@click.option("--model", default=None, help="Multimodal captioning model (default: $EGO2WEB_CAPTION_MODEL).")
@click.option("--base-url", default=None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL); "
                                               "the key is read from $OPENAI_API_KEY.")
@click.option("--task", "task_ids", multiple=True, help="Caption only this task's video (repeatable).")
@click.option("--clip-seconds", type=Finite(0, min_open=True), default=5.0, show_default=True,
              help="Length of each captioned clip.")
@click.option("--frames-per-clip", type=click.IntRange(1), default=4, show_default=True,
              help="Frames of each clip shown to the model.")
@click.option("--frame-size", type=click.IntRange(16), default=512, show_default=True,
              help="Longest side of the frames sent, in pixels.")
@click.option("--timeout", "timeout_s", type=Finite(0, min_open=True), default=120.0, show_default=True,
              help="Seconds to wait for one reply.")
@click.option("--force", is_flag=True, help="Caption again even when stored captions match the video.")
def captions_cmd(tasks_file: Path, model: str | None, base_url: str | None, task_ids: tuple[str, ...],
                 clip_seconds: float, frames_per_clip: int, frame_size: int, timeout_s: float, force: bool) -> None:
    """Caption the video of every task in TASKS_FILE, clip by clip, into <video>.captions.json.

    Each clip's frames go to a multimodal model, which answers a JSON object per
    clip (summary, objects, actions, text seen, brands, colours). Captions are
    kept by the video's hash: a video captioned before is not sent again.
    """
    from ..errors import MediaError
    from ..judge.captioner import LLMCaptioner
    from ..judge.client import LLMConfig
    from ..media.captions import caption_suite
    from ..tasks import load_tasks

    url = base_url or os.environ.get("OPENAI_BASE_URL")
    name = model or os.environ.get("EGO2WEB_CAPTION_MODEL")
    if not url or not name:
        raise MediaError("captions need a multimodal model: pass --model and --base-url "
                         "(or set EGO2WEB_CAPTION_MODEL and OPENAI_BASE_URL)")
    suite = load_tasks(tasks_file)
    check_endpoint(url, "captions")
    client = LLMCaptioner(LLMConfig(model=name, base_url=url, timeout_s=timeout_s, concurrency=1))
    for task_id, path, clips, calls in caption_suite(suite, client, task_ids=task_ids, clip_seconds=clip_seconds,
                                                     frames_per_clip=frames_per_clip, max_side=frame_size,
                                                     force=force):
        note = "cached" if calls == 0 else f"{calls} model call(s)"
        click.echo(f"{task_id}: {clips} clip caption(s) in {path} ({note})")


COMMANDS = [captions_cmd]
