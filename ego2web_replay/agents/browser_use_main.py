"""One browser-use episode, run as a program: ``python -m ego2web_replay.agents.browser_use_main [SETTINGS.json]``.

``--agent browser-use`` starts this in a process of its own (see
:mod:`ego2web_replay.agents.browser_use_agent`); it also works as a
``command:`` agent, since it reads the same ``EGO2WEB_*`` variables. It:

* takes the proxy from ``$EGO2WEB_PROXY`` and removes the generic proxy
  variables (``HTTP_PROXY`` ...) from its own environment, so **only Chromium**
  uses the proxy: browser-use's CDP websocket and the model endpoint (local or
  hosted) never go through the replay;
* launches Debian's Chromium through browser-use with the proxy set, Chromium's
  implicit loopback bypass removed (``--proxy-bypass-list=<-loopback>``, so a site
  on 127.0.0.1 is read through the proxy too), the project CA's SPKI pin, the
  sealing flags (:func:`~ego2web_replay.browser.sealed_chromium_args`), a fresh
  profile, no default extensions, and ``about:blank`` as its first page (no new-tab
  page, no search-engine start page) without browser-use's animation there (it loads a
  logo from browser-use's site): the only page requests are the task's;
* opens the task's start URL as browser-use's initial action (no model call);
* gives the model the instruction, the start URL, the allowed sites and what the
  input modality sends (``$EGO2WEB_INPUTS``: frames as images in every state
  message via browser-use's ``sample_images``, captions as text);
* writes browser-use's history to ``$EGO2WEB_OUT/history.json`` after every step (so an
  episode killed at its timeout keeps the steps it took) and its token usage to ``usage.json``;
* keeps the page as rendered after every step (URL, title, visible text after scripts ran, the
  DOM when small enough), read through browser-use's own CDP session, in
  ``$EGO2WEB_OUT/pages/step-NNN.json`` (:func:`capture_last_item`): what page-reading judges read.

Settings (a JSON object; all optional): ``model``, ``base_url``, ``temperature``,
``seed``, ``max_output_tokens``, ``timeout_s`` (per model call), ``max_actions_per_step``,
``use_vision``, ``headless``, ``step_timeout_s``. The API key is ``$EGO2WEB_AGENT_API_KEY``,
else ``$OPENAI_API_KEY``, else ``EMPTY`` (local servers).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "capture_last_item", "QUIET_ENV", "PROXY_VARS", "VIEWPORT", "task_text", "chromium_args", "start_blank_profile", "quiet_blank_pages"]

#: browser-use without telemetry, cloud sync, version checks, cloud hints or downloaded extensions.
QUIET_ENV: dict[str, str] = {
    "ANONYMIZED_TELEMETRY": "false",
    "BROWSER_USE_CLOUD_SYNC": "false",
    "BROWSER_USE_VERSION_CHECK": "false",
    "BROWSER_USE_CLOUD_HINTS": "false",
    "BROWSER_USE_DISABLE_EXTENSIONS": "1",
    "SKIP_LLM_API_KEY_VERIFICATION": "true",
}

#: Variables that would send browser-use's own HTTP and websocket traffic (CDP, model calls) to a proxy.
VIEWPORT = (1280, 800)  # the browser's viewport and window, in CSS pixels (device scale 1)
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
              "WS_PROXY", "WSS_PROXY", "ws_proxy", "wss_proxy")


def chromium_args(proxy_url: str, spki: str | None) -> list[str]:
    """Our Chromium flags for browser-use's launcher: the quiet flags, the sealing flags and the CA pin.
    (The proxy itself and its bypass list are browser-use's ``ProxySettings``.)"""
    from ..browser import CHROMIUM_FLAGS, sealed_chromium_args

    args = list(CHROMIUM_FLAGS) + sealed_chromium_args(proxy_url)
    if spki:
        args.append(f"--ignore-certificate-errors-spki-list={spki}")
    return args


def start_blank_profile(path: Path) -> Path:
    """A fresh Chromium profile whose first window opens ``about:blank``.

    Launched without a URL, Chromium opens its new-tab page, and Debian's build
    loads its search engine's start page (``start.duckduckgo.com``) there: a request
    no snapshot holds. browser-use's launcher cannot pass a URL, so the profile
    asks for ``about:blank`` on start-up instead.
    """
    default = path / "Default"
    default.mkdir(parents=True, exist_ok=True)
    prefs = {"session": {"restore_on_startup": 4, "startup_urls": ["about:blank"]},
             "homepage": "about:blank", "homepage_is_newtabpage": False,
             "browser": {"has_seen_welcome_page": True, "check_default_browser": False}}
    (default / "Preferences").write_text(json.dumps(prefs), "utf-8")
    return path


def quiet_blank_pages() -> None:
    """Turn off browser-use's "DVD screensaver" on ``about:blank`` tabs: it loads browser-use's logo
    from ``cf.browser-use.com`` through the page, a request of the framework, not of the task."""
    from browser_use.browser.watchdogs.aboutblank_watchdog import AboutBlankWatchdog

    async def _nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    AboutBlankWatchdog._show_dvd_screensaver_loading_animation_cdp = _nothing  # type: ignore[method-assign]


def task_text(task: dict[str, Any], inputs: dict[str, Any] | None) -> str:
    """The task as browser-use's model reads it: instruction, start URL, allowed sites, video input."""
    sites = ", ".join(task.get("allowed_domains") or []) or "any"
    lines = [str(task.get("instruction") or ""), "",
             f"The start page {task.get('start_url')} is already open. Stay on the allowed sites: {sites}."]
    modality = (inputs or {}).get("modality") or "none"
    frames = (inputs or {}).get("frames") or []
    captions = (inputs or {}).get("captions") or []
    if frames:
        what = "keyframes sampled over" if modality == "keyframes" else "frames of"
        stamps = ", ".join(f"t={float(f['t']):.1f}s" for f in frames)
        lines.append(f"The task depends on the user's egocentric video: the first {len(frames)} images of each "
                     f"message are {what} the whole video, in order ({stamps}).")
    if captions:
        lines.append("The task depends on the user's egocentric video; its captions (one per clip):")
        lines.extend(str(c) for c in captions)
    lines.append("When you have the answer, call done with the answer as its text.")
    return "\n".join(lines)


def _sample_images(frames: list[dict[str, Any]]) -> list[Any]:
    from browser_use.llm.messages import ContentPartImageParam, ContentPartTextParam, ImageURL

    parts: list[Any] = []
    for f in frames:
        path = Path(f["path"])
        mime: Any = "image/png" if path.suffix.lower() == ".png" else "image/jpeg"
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(ContentPartTextParam(text=f"Video frame at t={float(f['t']):.1f}s:"))
        parts.append(ContentPartImageParam(image_url=ImageURL(url=f"data:{mime};base64,{data}", media_type=mime)))
    return parts


def _llm(settings: dict[str, Any]) -> Any:
    import httpx
    from browser_use import ChatOpenAI

    model = settings.get("model") or os.environ.get("EGO2WEB_AGENT_MODEL")
    if not model:
        raise SystemExit("browser-use agent: no model (settings 'model' or $EGO2WEB_AGENT_MODEL)")
    key = os.environ.get("EGO2WEB_AGENT_API_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    timeout = float(settings.get("timeout_s") or 120.0)
    kwargs: dict[str, Any] = {
        "model": model, "base_url": settings.get("base_url") or os.environ.get("OPENAI_BASE_URL"), "api_key": key,
        "temperature": float(settings.get("temperature") or 0.0), "seed": settings.get("seed"),
        "timeout": timeout, "max_retries": int(settings.get("http_retries", 3)),
        # trust_env=False: the model endpoint is the agent's own service, never reached through the replay proxy
        "http_client": httpx.AsyncClient(trust_env=False, timeout=timeout),
    }
    if settings.get("max_output_tokens"):
        kwargs["max_completion_tokens"] = int(settings["max_output_tokens"])
    return ChatOpenAI(**kwargs)


async def _run(settings: dict[str, Any], task: dict[str, Any], inputs: dict[str, Any] | None, out: Path,
               proxy_url: str, spki: str | None, max_steps: int) -> int:
    from browser_use import Agent, BrowserProfile, BrowserSession
    from browser_use.browser.profile import ProxySettings, ViewportSize

    from ..browser import chromium_executable

    quiet_blank_pages()
    tmp = Path(os.environ.get("TMPDIR") or "/tmp")
    profile_dir = start_blank_profile(tmp / "chromium-profile")
    profile = BrowserProfile(
        executable_path=chromium_executable(), headless=bool(settings.get("headless", True)),
        chromium_sandbox=False, user_data_dir=profile_dir, enable_default_extensions=False,
        proxy=ProxySettings(server=proxy_url, bypass="<-loopback>"),
        args=chromium_args(proxy_url, spki), keep_alive=False, viewport=ViewportSize(width=VIEWPORT[0], height=VIEWPORT[1]),
        window_size=ViewportSize(width=VIEWPORT[0], height=VIEWPORT[1]), device_scale_factor=1.0, captcha_solver=False,
    )
    frames = (inputs or {}).get("frames") or []
    start_url = task.get("start_url")
    agent: Any = Agent(
        task=task_text(task, inputs), llm=_llm(settings), browser_session=BrowserSession(browser_profile=profile),
        initial_actions=[{"navigate": {"url": start_url, "new_tab": False}}] if start_url else None,
        directly_open_url=False, use_vision=bool(settings.get("use_vision", True)),
        sample_images=_sample_images(frames) or None, use_judge=False, generate_gif=False, calculate_cost=False,
        max_actions_per_step=int(settings.get("max_actions_per_step", 5)),
        step_timeout=int(settings.get("step_timeout_s", 180)), enable_signal_handler=False,
        llm_screenshot_size=tuple(size) if (size := settings.get("screenshot_size")) else None,
        source="ego2web-replay",
    )
    captured: set[int] = set()

    async def save(_: Any = None) -> None:
        save_history(agent.history, out)

    async def after_step(_: Any = None) -> None:
        save_history(agent.history, out)
        await capture_last_item(agent.browser_session, out, captured)

    try:  # after each step (and before the first, for the initial actions): a killed run keeps its steps
        await agent.run(max_steps=max_steps, on_step_start=after_step, on_step_end=after_step)
    finally:
        await save()  # what was done, even when the run failed
    return 0


#: Reads the page as rendered: URL, title, visible text (one character past the limit, to tell a cut)
#: and the DOM when it is at most the DOM limit (else only its length).
_PAGE_JS = """(() => {{ const dom = document.documentElement ? document.documentElement.outerHTML : '';
  return {{url: location.href, title: document.title,
           text: document.body ? document.body.innerText.slice(0, {text_max} + 1) : '',
           dom_chars: dom.length, dom: dom.length <= {dom_max} ? dom : null}}; }})()"""


async def capture_last_item(session: Any, out: Path, captured: set[int], timeout_s: float = 15.0) -> None:
    """The page as rendered now, as the page after the last history item (``history.json``, just saved):
    ``pages/step-NNN.json`` (a :class:`~ego2web_replay.models.PageCapture`, NNN our last step of that item)
    and the DOM beside it. Read through browser-use's own CDP session on the page it acts on (the runner
redacts the URL when it adopts the capture, as it does the trajectory's). An item
    is captured once (``captured``); a page that cannot be read is written with its ``error``, never raised."""
    from datetime import UTC, datetime

    from ..models import DOM_MAX_CHARS, PAGE_TEXT_MAX_CHARS, PageCapture, save_model
    from .browser_use import last_steps, page_file

    items = json.loads((out / "history.json").read_text("utf-8")).get("history") or []
    if not items or len(items) - 1 in captured or (index := last_steps(items)[-1]) is None:
        return
    captured.add(len(items) - 1)
    rel = page_file(index)
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    capture = PageCapture(step=index, url="", captured_at=datetime.now(UTC))
    try:
        cdp = await session.get_or_create_cdp_session(focus=False)
        reply = await asyncio.wait_for(cdp.cdp_client.send.Runtime.evaluate(
            params={"expression": _PAGE_JS.format(text_max=PAGE_TEXT_MAX_CHARS, dom_max=DOM_MAX_CHARS),
                    "returnByValue": True}, session_id=cdp.session_id), timeout_s)
        if "exceptionDetails" in reply:
            raise RuntimeError(str(reply["exceptionDetails"].get("text") or "the page's script failed"))
        page = reply["result"]["value"]
    except Exception as e:  # noqa: BLE001 - the episode goes on; the capture says why it holds no page
        capture.error = f"page not read: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        try:
            capture.url = str(await session.get_current_page_url())
        except Exception:  # noqa: BLE001 - no URL either
            pass
        save_model(out / rel, capture)
        return
    text = str(page.get("text") or "")
    capture.url, capture.title = str(page.get("url") or ""), str(page.get("title") or "")
    capture.text, capture.truncated = text[:PAGE_TEXT_MAX_CHARS], len(text) > PAGE_TEXT_MAX_CHARS
    if page.get("dom") is not None:
        capture.dom = rel.removesuffix(".json") + ".html"
        (out / capture.dom).write_text(str(page["dom"]), "utf-8")
    else:
        capture.dom_note = f"DOM of {int(page.get('dom_chars') or 0):,} characters not kept (limit {DOM_MAX_CHARS:,})"
    save_model(out / rel, capture)


def save_history(history: Any, out: Path) -> None:
    """``history.json`` (replaced whole, never half-written) and ``usage.json`` (model calls and tokens)."""
    partial = out / "history.json.partial"
    history.save_to_file(partial)
    os.replace(partial, out / "history.json")
    usage = getattr(history, "usage", None)
    if usage is not None:
        (out / "usage.json").write_text(json.dumps({
            "calls": usage.entry_count, "prompt_tokens": usage.total_prompt_tokens,
            "completion_tokens": usage.total_completion_tokens}) + "\n", "utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = os.environ
    try:
        settings: dict[str, Any] = json.loads(Path(argv[0]).read_text("utf-8")) if argv else {}
        proxy_url = env["EGO2WEB_PROXY"]
        out = Path(env["EGO2WEB_OUT"])
        task = json.loads(Path(env["EGO2WEB_TASK_FILE"]).read_text("utf-8"))
        inputs = json.loads(Path(env["EGO2WEB_INPUTS"]).read_text("utf-8")) if env.get("EGO2WEB_INPUTS") else None
    except KeyError as e:
        print(f"browser-use agent: ${e.args[0]} is not set (run it through ego2web-replay)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"browser-use agent: cannot read its settings or task: {e}", file=sys.stderr)
        return 2
    for name in PROXY_VARS:
        env.pop(name, None)
    for name, value in QUIET_ENV.items():
        env.setdefault(name, value)
    out.mkdir(parents=True, exist_ok=True)
    max_steps = int(env.get("EGO2WEB_MAX_STEPS") or 40)
    return asyncio.run(_run(settings, task, inputs, out, proxy_url, env.get("EGO2WEB_SPKI"), max_steps))


if __name__ == "__main__":
    raise SystemExit(main())
