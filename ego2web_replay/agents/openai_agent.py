"""A simple but honest multimodal browsing agent over any OpenAI-compatible chat endpoint.

Each step sends the instruction, the start URL and allowed sites, what the
input modality gives (frames sampled over the whole video, the video itself as
a ``video_url`` part, or its captions), the current screenshot (scaled to at
most ``image_max_side`` pixels) and a numbered list of interactive elements,
and asks for one action as a JSON object ``{"thought": ..., "action": {...}}``.
The first action is always ``goto start_url`` (no model call). A malformed
reply is answered with the parse error and retried (``max_retries``); a reply
that stays malformed ends the episode. HTTP 408/429/5xx, timeouts and refused
connections are retried with exponential backoff, or after the server's
``Retry-After`` when it sends one (``http_retries``; :mod:`ego2web_replay.retry`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import AgentError, ModelEndpointError
from ..models import Action, AgentSpec, Task
from ..retry import RetriesExhausted, retry_call
from .base import Observation

__all__ = ["OpenAIAgent", "parse_action_reply", "MalformedReply"]

SYSTEM_PROMPT = """You are a web agent operating a real browser to complete a task.
Each turn you see the task, what you are given of the user's egocentric video (frames, the video, or
captions; the task depends on what it shows), the current page's screenshot, its URL and title,
and a numbered list of interactive elements. Stay on the allowed sites.
Reply with ONE JSON object and nothing else:
{"thought": "<short reasoning>", "action": {"kind": "<kind>", ...}}
Kinds: goto {url}; click {element: N} or {selector} or {text}; type {element: N or selector, value};
press {key}; scroll {dy}; back; wait {seconds}; answer {answer} (ends the task); stop (give up).
"""


class MalformedReply(ValueError):
    """The model's reply did not hold one valid action."""


def parse_action_reply(text: str) -> tuple[Action, str | None]:
    """Parse ``{"thought", "action"}`` (also inside a ```json fence); element numbers become selectors."""
    m = re.search(r"\{.*\}", text or "", re.S)
    if not m:
        raise MalformedReply("no JSON object in the reply")
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError as e:
        raise MalformedReply(f"invalid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise MalformedReply("the reply is not a JSON object")
    act = data.get("action", data)
    if not isinstance(act, dict):
        raise MalformedReply("'action' must be an object")
    act = dict(act)
    if "element" in act:
        el = act.pop("element")
        if not isinstance(el, int | str) or not str(el).isdigit():
            raise MalformedReply("'element' must be an element number")
        act.setdefault("selector", f'[data-e2w-id="{int(el)}"]')
    if "type" in act and "kind" not in act:
        act["kind"] = act.pop("type")
    try:
        action = Action.model_validate(act)
    except ValidationError as e:
        first = e.errors()[0]
        raise MalformedReply(f"invalid action: {'.'.join(map(str, first['loc']))} {first['msg']}") from None
    thought = data.get("thought")
    return action, thought if isinstance(thought, str) else None


def _image_part(path: Path, max_side: int | None = None) -> dict[str, Any]:
    raw = path.read_bytes()
    mime = "image/png" if path.suffix.lower() == ".png" else "image/jpeg"
    if max_side:
        raw, mime = _scaled(raw, mime, max_side)
    data = base64.b64encode(raw).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def _scaled(raw: bytes, mime: str, max_side: int) -> tuple[bytes, str]:
    """The image scaled so its longest side is at most ``max_side`` (PNG); unchanged when smaller."""
    import io

    import av

    from ..png import png_from_array

    try:
        with av.open(io.BytesIO(raw), "r") as c:
            frame = next(c.decode(video=0))
    except (av.FFmpegError, StopIteration, OSError, ValueError):
        return raw, mime
    scale = max_side / max(frame.width, frame.height)
    if scale >= 1:
        return raw, mime
    w, h = max(2, round(frame.width * scale)), max(2, round(frame.height * scale))
    return png_from_array(frame.reformat(width=w, height=h, format="rgb24").to_ndarray()), "image/png"


def _video_part(path: Path) -> dict[str, Any]:
    mime = {".webm": "video/webm", ".mov": "video/quicktime"}.get(path.suffix.lower(), "video/mp4")
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"type": "video_url", "video_url": {"url": f"data:{mime};base64,{data}"}}


class OpenAIAgent:
    """See the module docstring. ``api_key`` defaults to ``$OPENAI_API_KEY`` (``EMPTY`` for local servers)."""

    def __init__(self, model: str | None = None, base_url: str | None = None, *, api_key: str | None = None,
                 max_retries: int = 2, http_retries: int = 3, backoff_s: float = 1.0, timeout_s: float = 60.0,
                 input_modality: str = "keyframes", temperature: float = 0.0, history_turns: int = 6,
                 seed: int | None = None, max_output_tokens: int | None = None, image_max_side: int | None = 1280,
                 retry_after_max_s: float = 120.0) -> None:
        model = model or os.environ.get("EGO2WEB_AGENT_MODEL")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not model:
            raise AgentError("the openai agent needs --model (or EGO2WEB_AGENT_MODEL)")
        if not base_url and not os.environ.get("OPENAI_API_KEY"):
            raise AgentError("the openai agent needs --base-url (or OPENAI_BASE_URL) or OPENAI_API_KEY for the hosted API")
        self.model, self.base_url = model, base_url
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.max_retries, self.http_retries, self.backoff_s = max_retries, http_retries, backoff_s
        self.timeout_s, self.temperature, self.history_turns = timeout_s, temperature, history_turns
        self.seed, self.max_output_tokens, self.image_max_side = seed, max_output_tokens, image_max_side
        self.retry_after_max_s = retry_after_max_s
        self.spec = AgentSpec(name="openai", model=model, input_modality=input_modality,  # type: ignore[arg-type]
                              settings={"base_url": base_url, "temperature": temperature, "max_retries": max_retries,
                                        "history_turns": history_turns, "seed": seed,
                                        "max_output_tokens": max_output_tokens, "timeout_s": timeout_s,
                                        "image_max_side": image_max_side})
        self._task: Task | None = None
        self.last_thought: str | None = None
        self._client: Any = None
        self._history: list[str] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}

    def client(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0,
                                         timeout=self.timeout_s)
        return self._client

    def start(self, task: Task) -> None:
        self._history = []
        self._task = task

    def _messages(self, obs: Observation, correction: str | None) -> list[dict[str, Any]]:
        task = obs.task
        sites = ", ".join(task.allowed_domains) or "any"
        content: list[dict[str, Any]] = [{"type": "text", "text": f"Task: {task.instruction}\n"
                                                                  f"Start URL: {task.start_url}\nAllowed sites: {sites}"}]
        modality = self.spec.input_modality
        if obs.keyframes and modality in ("keyframes", "video"):
            what = "Keyframes sampled over the whole video" if modality == "keyframes" else "Frames of the video"
            content.append({"type": "text", "text": f"{what} (timestamps in seconds):"})
            for ts, path in obs.keyframes:
                content.append({"type": "text", "text": f"t={ts:.1f}s"})
                content.append(_image_part(path))
        elif obs.video is not None and modality == "video":
            content.append({"type": "text", "text": "The egocentric video:"})
            content.append(_video_part(obs.video))
        if obs.captions and modality == "captions":
            content.append({"type": "text", "text": "Video captions (one per clip):\n" + "\n".join(obs.captions)})
        if self._history:
            content.append({"type": "text", "text": "Your previous actions:\n" + "\n".join(self._history[-self.history_turns:])})
        lines = [f"[{e['id']}] {e['tag']}{'(' + e['type'] + ')' if e.get('type') else ''} "
                 f"{e.get('text', '')!r}{' -> ' + e['href'] if e.get('href') else ''}" for e in obs.elements]
        content.append({"type": "text", "text": f"Step {obs.step}. URL: {obs.url}\nTitle: {obs.title}\n"
                                                 "Interactive elements:\n" + ("\n".join(lines) or "(none)")})
        if obs.last_error:
            content.append({"type": "text", "text": f"Your last action failed: {obs.last_error}"})
        if obs.screenshot and obs.screenshot.exists():
            content.append(_image_part(obs.screenshot, self.image_max_side))
        msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": content}]
        if correction:
            msgs.append({"role": "user", "content": f"Your reply could not be used ({correction}). "
                                                    "Reply with exactly one JSON object as specified."})
        return msgs

    def _call(self, messages: list[dict[str, Any]]) -> str:
        import openai

        def once() -> Any:
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
            if self.seed is not None:
                kwargs["seed"] = self.seed
            if self.max_output_tokens is not None:
                kwargs["max_completion_tokens"] = self.max_output_tokens  # what reasoning models require
            return self.client().chat.completions.create(**kwargs)

        try:
            resp = retry_call(once, retries=self.http_retries, backoff_s=self.backoff_s,
                              retry_after_max_s=self.retry_after_max_s, sleep=lambda s: time.sleep(s))
        except RetriesExhausted as e:  # the service down or overloaded: the episode could not run
            raise ModelEndpointError(f"the model endpoint failed after {e.attempts} attempts: "
                                     f"{type(e.last).__name__}: {str(e.last)[:200]}") from None
        except openai.APIStatusError as e:
            raise AgentError(f"the model endpoint answered HTTP {e.status_code}: {str(e)[:200]}") from None
        self.usage["calls"] += 1
        if resp.usage:
            self.usage["prompt_tokens"] += resp.usage.prompt_tokens or 0
            self.usage["completion_tokens"] += resp.usage.completion_tokens or 0
        return resp.choices[0].message.content or ""

    def act(self, obs: Observation) -> Action:
        if obs.step == 0 and obs.task.start_url and obs.url != obs.task.start_url:
            self.last_thought = "open the task's start URL"
            self._history.append(f"0: goto {obs.task.start_url}")
            return Action(kind="goto", url=obs.task.start_url)
        correction: str | None = None
        for _ in range(self.max_retries + 1):
            reply = self._call(self._messages(obs, correction))
            try:
                action, thought = parse_action_reply(reply)
            except MalformedReply as e:
                correction = str(e)
                continue
            self._history.append(f"{obs.step}: {action.describe()}")
            self.last_thought = thought
            return action
        raise MalformedReply(f"the model's reply stayed malformed after {self.max_retries + 1} tries: {correction}")
