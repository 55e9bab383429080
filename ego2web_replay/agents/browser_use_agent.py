"""``--agent browser-use``: the browser-use framework (PyPI ``browser-use``, the ``browser-use`` extra).

Each episode runs :mod:`ego2web_replay.agents.browser_use_main` in a process of
its own (killed with its Chromium at the episode timeout), with:

* an environment **without** the generic proxy variables: browser-use's CDP
  websocket and its model endpoint (local or hosted) never reach the replay;
  only its Chromium is pointed at the proxy, with the loopback bypass removed;
* browser-use's telemetry, cloud sync, version check, cloud hints and default
  extensions off (:data:`~ego2web_replay.agents.browser_use_main.QUIET_ENV`);
* ``TMPDIR`` set to a folder of its own (browser-use's screenshots, file system
  and Chromium profile), removed after its history is converted;
* the ``EGO2WEB_*`` variables of ``command:`` agents (task, inputs, out folder,
  proxy, CA pin, step budget) and a settings file (model, endpoint, sampling).

Its ``history.json`` becomes our trajectory (:mod:`ego2web_replay.agents.browser_use`);
screenshots are copied into the episode. The model is any OpenAI-compatible
endpoint (browser-use's ``ChatOpenAI`` with a base URL).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import AgentError
from ..models import AgentSpec, Task, Trajectory
from .base import EpisodeEnv
from .browser_use import convert_browser_use_history
from .browser_use_main import PROXY_VARS, QUIET_ENV, VIEWPORT
from .command import CommandAgent

__all__ = ["BrowserUseAgent", "browser_use_version"]

SETTINGS_FILE = "browser_use_settings.json"
MAIN_MODULE = "ego2web_replay.agents.browser_use_main"


def browser_use_version() -> str:
    """The installed browser-use version; :class:`AgentError` saying how to install it when absent."""
    try:
        return metadata.version("browser-use")
    except metadata.PackageNotFoundError:
        raise AgentError("the browser-use agent needs the browser-use package: "
                         "pip install 'ego2web-replay[browser-use]'") from None


class BrowserUseAgent(CommandAgent):
    """See the module docstring. ``api_key`` defaults to ``$OPENAI_API_KEY`` (``EMPTY`` for local servers)."""

    def __init__(self, model: str | None = None, base_url: str | None = None, *, api_key: str | None = None,
                 input_modality: str = "keyframes", temperature: float = 0.0, seed: int | None = None,
                 max_output_tokens: int | None = None, timeout_s: float = 120.0, max_actions_per_step: int = 5,
                 use_vision: bool = True, headless: bool = True, http_retries: int = 3,
                 image_max_side: int | None = None) -> None:
        version = browser_use_version()
        model = model or os.environ.get("EGO2WEB_AGENT_MODEL")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not model:
            raise AgentError("the browser-use agent needs --model (or EGO2WEB_AGENT_MODEL)")
        if not base_url and not (api_key or os.environ.get("OPENAI_API_KEY")):
            raise AgentError("the browser-use agent needs --base-url (or OPENAI_BASE_URL) "
                             "or OPENAI_API_KEY for the hosted API")
        screenshot_size = None
        if image_max_side is not None:  # browser-use resizes to a width and height: keep the viewport's shape
            screenshot_size = [image_max_side, round(image_max_side * VIEWPORT[1] / VIEWPORT[0])]
            if min(screenshot_size) < 100:
                raise AgentError(f"browser-use sends screenshots at least 100 pixels a side: --image-size "
                                 f"{image_max_side} would make them {screenshot_size[0]}x{screenshot_size[1]}; "
                                 f"use {-(-100 * VIEWPORT[0] // VIEWPORT[1])} or more")
        super().__init__(shlex.join([sys.executable, "-m", MAIN_MODULE]), base_url=base_url)
        self.api_key = api_key
        self.settings: dict[str, Any] = {
            "model": model, "base_url": base_url, "temperature": temperature, "seed": seed,
            "max_output_tokens": max_output_tokens, "timeout_s": timeout_s,
            "max_actions_per_step": max_actions_per_step, "use_vision": use_vision, "headless": headless,
            "http_retries": http_retries, "screenshot_size": screenshot_size}
        self.spec = AgentSpec(name="browser-use", model=model, input_modality=input_modality,  # type: ignore[arg-type]
                              settings={**self.settings, "browser_use_version": version})
        self._tmp: Path | None = None

    def environment(self, env: EpisodeEnv) -> dict[str, str]:
        out = super().environment(env)
        for name in (*PROXY_VARS, "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                     "NODE_EXTRA_CA_CERTS"):
            out.pop(name, None)  # only Chromium uses the proxy and the project CA
        out.update(QUIET_ENV)
        out["EGO2WEB_MODALITY"] = self.spec.input_modality
        if self.api_key:
            out["EGO2WEB_AGENT_API_KEY"] = self.api_key
        if self._tmp is not None:
            out.update({"TMPDIR": str(self._tmp), "BROWSER_USE_CONFIG_DIR": str(self._tmp / "config"),
                        "XDG_CONFIG_HOME": str(self._tmp / "xdg-config"), "XDG_CACHE_HOME": str(self._tmp / "xdg-cache")})
        return out

    def run_episode(self, task: Task, env: EpisodeEnv) -> Trajectory:
        env.out_dir.mkdir(parents=True, exist_ok=True)
        settings_file = env.out_dir / SETTINGS_FILE
        settings_file.write_text(json.dumps(self.settings, indent=1) + "\n", "utf-8")
        self.program = shlex.join([sys.executable, "-m", MAIN_MODULE, str(settings_file)])
        note = self._frames_for_video(env)
        with tempfile.TemporaryDirectory(prefix="ego2web-browser-use-") as tmp:
            self._tmp = Path(tmp)
            try:
                traj = super().run_episode(task, env)
                self._read_extras(traj, env.out_dir)  # while browser-use's screenshots still exist
            finally:
                self._tmp = None
        traj.agent = self.spec
        if note and env.inputs is not None:  # what was sent, as the runner records it
            sent = json.loads(env.inputs.read_text("utf-8"))
            traj.extra["inputs"] = {"modality": sent["modality"], "frames": [f["t"] for f in sent["frames"]],
                                    "captions": len(sent.get("captions") or []),
                                    "video": Path(sent["video"]).name, "note": note}
        return traj

    @staticmethod
    def _read_extras(traj: Trajectory, out: Path) -> None:
        """Usage into ``extra["usage"]``; after a timeout, the steps the history holds (the reason stays)."""
        try:
            traj.extra["usage"] = json.loads((out / "usage.json").read_text("utf-8"))
        except (OSError, ValueError):
            pass
        if traj.end_reason == "timeout" and not traj.steps and (out / "history.json").exists():
            try:
                steps, _ = convert_browser_use_history(json.loads((out / "history.json").read_text("utf-8")), out)
            except (OSError, ValueError):
                return
            traj.steps = steps

    def _frames_for_video(self, env: EpisodeEnv) -> str | None:
        """browser-use sends images, not video: a ``video`` input sent as ``video_url`` becomes frames."""
        if env.inputs is None:
            return None
        data = json.loads(env.inputs.read_text("utf-8"))
        if data.get("modality") != "video" or data.get("frames") or not data.get("video"):
            return None
        from ..media.keyframes import sample_video

        inputs = self.spec.settings.get("inputs") or {}
        fps, side = float(inputs.get("video_fps") or 1.0), int(inputs.get("max_side") or 512)
        frames = sample_video(Path(data["video"]), fps=fps, max_side=side)
        data["frames"] = [{"t": round(f.timestamp, 3), "path": str(f.path)} for f in frames]
        env.inputs.write_text(json.dumps(data, indent=1) + "\n", "utf-8")
        return f"browser-use takes images, not video: the video was sent as {len(frames)} frames at {fps:g} per second"
