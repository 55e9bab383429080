"""Debian's Chromium driven by Playwright, through our proxy, trusting only our CA.

Playwright's own browser download cannot work offline, so we launch the
system binary (``/usr/lib/chromium/chromium``; ``$EGO2WEB_CHROMIUM`` overrides)
with the flags that keep it quiet. Trust: Chromium accepts certificates signed
by our CA through ``--ignore-certificate-errors-spki-list`` (only that key).

Sealing (DESIGN decision 10): every Chromium the project launches behind a proxy
gets :func:`sealed_chromium_args`, so WebRTC sends no UDP outside the proxy and
Chromium resolves no host name itself (the proxy does, or in frozen mode nobody
does). Any other launcher (an agent framework such as browser-use, a program
agent's own browser) must add the same flags; ``docs/sealing.md`` says what a
client the project does not launch must set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import BrowserError
from .models import DOM_MAX_CHARS, PAGE_TEXT_MAX_CHARS, Action, PageCapture

__all__ = [
    "CHROMIUM_FLAGS",
    "WEBRTC_SEALING_FLAGS",
    "sealed_chromium_args",
    "svg_to_png",
    "settle_page",
    "chromium_executable",
    "chromium_version",
    "acquire_playwright",
    "release_playwright",
    "BrowserSession",
    "browser_session",
    "perform_action",
    "take_screenshot",
    "capture_page",
    "keep_page",
    "read_page",
]

CHROMIUM_FLAGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    "--metrics-recording-only",
    "--no-pings",
    "--disable-quic",
    "--font-render-hinting=none",
    "--hide-scrollbars",
)


#: WebRTC may use only TCP through the configured proxy: no STUN/TURN datagrams, no host
#: candidates. Chromium 156 reads ``--webrtc-ip-handling-policy``; older builds read the
#: ``force-`` spelling, so both are given (an unknown switch is ignored).
WEBRTC_SEALING_FLAGS: tuple[str, ...] = (
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)


def sealed_chromium_args(proxy_url: str | None = None) -> list[str]:
    """The Chromium flags that keep a browser behind ``proxy_url`` sealed on every channel.

    * WebRTC: :data:`WEBRTC_SEALING_FLAGS` (always; harmless without a proxy).
    * Names: with a proxy, ``--host-resolver-rules`` maps every host name to a
      failed lookup except loopback and the proxy's own host, so Chromium's own
      resolver (DNS prefetch, preconnect, WebRTC's STUN hosts, background
      services) never asks the system resolver; page requests still work because
      the proxy resolves (live) or answers (frozen) them.
    """
    args = list(WEBRTC_SEALING_FLAGS)
    if proxy_url:
        keep = ["localhost", "127.0.0.1", "[::1]"]
        host = urlsplit(proxy_url if "://" in proxy_url else "http://" + proxy_url).hostname
        if host and host not in ("localhost", "127.0.0.1", "::1", "per-context"):
            keep.append(host)
        rules = ", ".join(["MAP * ~NOTFOUND"] + [f"EXCLUDE {h}" for h in keep])
        args += [f"--host-resolver-rules={rules}", "--dns-prefetch-disable"]
    return args


_local = threading.local()


def acquire_playwright() -> Any:
    """This thread's sync Playwright driver, started on first use and shared after.

    A thread can run only one sync Playwright at a time, so every browser session
    of a thread (a test suite's shared browser, a recording, a replay) shares one;
    :func:`release_playwright` stops it when the last user lets go.
    """
    from playwright.sync_api import sync_playwright

    if getattr(_local, "users", 0) == 0:
        _local.pw = sync_playwright().start()
        _local.users = 0
    _local.users += 1
    return _local.pw


def release_playwright() -> None:
    """Let go of :func:`acquire_playwright`'s driver; the last release stops it."""
    users = getattr(_local, "users", 0)
    if users <= 0:
        return
    _local.users = users - 1
    if _local.users == 0:
        pw, _local.pw = _local.pw, None
        pw.stop()


def chromium_executable() -> str:
    """The Chromium binary to launch, or :class:`BrowserError` saying how to install one."""
    env = os.environ.get("EGO2WEB_CHROMIUM")
    candidates = [env] if env else ["/usr/lib/chromium/chromium", shutil.which("chromium") or "",
                                    shutil.which("chromium-browser") or ""]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise BrowserError("Chromium not found; install it with 'apt-get install chromium' "
                       "or set EGO2WEB_CHROMIUM to its binary")


@lru_cache(maxsize=1)
def chromium_version() -> str:
    """E.g. ``Chromium 156.0.8078.108``; ``unknown`` if it cannot be asked."""
    try:
        out = subprocess.run([chromium_executable(), "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError, BrowserError):
        return "unknown"


class BrowserSession:
    """A running Playwright + Chromium; make pages with :meth:`new_context`.

    ``proxy_url`` routes every request (loopback included) through our proxy;
    ``spki`` is the CA pin to trust. ``playwright`` reuses a running sync Playwright
    (one thread can run only one).
    """

    def __init__(self, *, proxy_url: str | None = None, spki: str | None = None, headless: bool = True,
                 extra_args: Sequence[str] = (), per_context_proxy: bool = False,
                 playwright: Any = None) -> None:
        self.proxy_url = proxy_url
        self._shared_pw = playwright
        self.per_context_proxy = per_context_proxy
        self.spki = spki
        self.headless = headless
        self.extra_args = list(extra_args)
        self._pw: Any = None
        self.browser: Any = None

    def start(self) -> BrowserSession:
        from playwright.sync_api import Error as PlaywrightError

        proxied = self.proxy_url or ("http://127.0.0.1" if self.per_context_proxy else None)
        args = list(CHROMIUM_FLAGS) + sealed_chromium_args(proxied) + self.extra_args
        if self.spki:
            args.append(f"--ignore-certificate-errors-spki-list={self.spki}")
        kwargs: dict[str, Any] = {"executable_path": chromium_executable(), "headless": self.headless, "args": args}
        if self.per_context_proxy:
            kwargs["proxy"] = {"server": "http://per-context"}
        elif self.proxy_url:
            # Playwright adds <-loopback> to the bypass list, so loopback goes through the proxy too.
            kwargs["proxy"] = {"server": self.proxy_url}
        pw = self._shared_pw or acquire_playwright()
        self._pw = None if self._shared_pw else pw
        try:
            self.browser = pw.chromium.launch(**kwargs)
        except PlaywrightError as e:
            if self._pw is not None:
                release_playwright()
            self._pw = None
            raise BrowserError(f"Chromium did not start: {str(e).splitlines()[0]}") from None
        return self

    def new_context(self, *, viewport: tuple[int, int] = (1280, 800), init_scripts: Sequence[str] = (),
                    proxy_url: str | None = None, **kwargs: Any) -> Any:
        """A fresh context (own cookies and cache); ``proxy_url`` needs ``per_context_proxy=True``."""
        if proxy_url:
            kwargs["proxy"] = {"server": proxy_url, "bypass": "<-loopback>"}
        ctx = self.browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                       device_scale_factor=1, locale="en-US", timezone_id="UTC", **kwargs)
        for script in init_scripts:
            ctx.add_init_script(script)
        return ctx

    def close(self) -> None:
        try:
            if self.browser is not None:
                self.browser.close()
        finally:
            self.browser = None
            if self._pw is not None:
                release_playwright()
                self._pw = None

    def __enter__(self) -> BrowserSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def svg_to_png(svgs: Sequence[Path]) -> list[Path]:
    """Render each SVG file, as Chromium draws it, to a PNG beside it (``x.svg`` → ``x.png``); returns the PNGs.

    The files are opened from disk in headless Chromium (no proxy, no network) and the ``<svg>`` element is
    screenshot at its own size."""
    pngs = []
    with BrowserSession() as session:
        ctx = session.new_context()
        try:
            page = ctx.new_page()
            for svg in svgs:
                png = svg.with_suffix(".png")
                page.goto(svg.resolve().as_uri())
                page.locator("svg").first.screenshot(path=str(png))
                pngs.append(png)
        finally:
            ctx.close()
    return pngs


@contextmanager
def browser_session(**kwargs: Any) -> Iterator[BrowserSession]:
    """``with browser_session(proxy_url=..., spki=...) as b: page = b.new_context().new_page()``."""
    session = BrowserSession(**kwargs).start()
    try:
        yield session
    finally:
        session.close()


def _settle(page: Any, timeout_ms: float) -> None:
    try:
        page.wait_for_load_state("load", timeout=timeout_ms)
    except Exception:  # noqa: BLE001 - a page that never finishes loading is still usable
        pass
    try:
        page.wait_for_load_state("networkidle", timeout=min(timeout_ms, 5000))
    except Exception:  # noqa: BLE001
        pass


def perform_action(page: Any, action: Action, *, timeout_s: float = 30.0) -> None:
    """Carry out one :class:`Action` on a Playwright page and wait for the page to settle.

    Raises Playwright's errors for a missing element or a failed navigation;
    the caller records them on the step.
    """
    t = timeout_s * 1000
    k = action.kind
    if k == "goto":
        page.goto(action.url, wait_until="load", timeout=t)
    elif k == "click":
        if action.selector:
            loc = page.locator(action.selector)
            if action.text:
                loc = loc.filter(has_text=action.text)
            loc.first.click(timeout=t)
        elif action.text:
            page.get_by_text(action.text, exact=False).first.click(timeout=t)
        else:
            page.mouse.click(action.x, action.y)
    elif k == "type":
        if action.selector:
            page.locator(action.selector).first.fill(action.value or "", timeout=t)
        else:
            page.keyboard.type(action.value or "")
    elif k == "press":
        if action.selector:
            page.locator(action.selector).first.press(action.key, timeout=t)
        else:
            page.keyboard.press(action.key)
    elif k == "scroll":
        page.mouse.wheel(action.dx, action.dy)
    elif k == "back":
        page.go_back(wait_until="load", timeout=t)
    elif k == "wait":
        if action.selector:
            page.locator(action.selector).first.wait_for(timeout=t)
        elif action.text:
            page.get_by_text(action.text).first.wait_for(timeout=t)
        else:
            time.sleep(min(action.seconds or 1.0, timeout_s))
    # answer/stop do nothing in the page
    if k in ("goto", "click", "press", "back", "type"):
        _settle(page, t)


SETTLE_JS = """(horizonMs) => {
  const f = globalThis.__ego2webFreeze;
  return f && typeof f.settle === "function" ? f.settle(horizonMs, 5000) : -1;
}"""


def settle_page(page: Any, horizon_ms: float = 5000.0) -> int:
    """Advance a frozen page's virtual time until pending short timers and animation frames have run.

    With the determinism freeze installed (frozen mode), one-shot timers due within ``horizon_ms``
    and pending ``requestAnimationFrame`` callbacks run now, in due order, so what a screenshot
    shows does not depend on how busy the machine was; CSS animations and transitions are finished
    by the screenshot itself (``animations="disabled"``). Without the freeze it does nothing (-1).
    """
    try:
        return int(page.evaluate(SETTLE_JS, horizon_ms))
    except Exception:  # noqa: BLE001 - a page mid-navigation: nothing to settle
        return -1


def take_screenshot(page: Any, path: Path) -> Path:
    """Viewport screenshot as PNG (page time settled, animations off, caret hidden, so it is repeatable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    settle_page(page)
    page.screenshot(path=str(path), animations="disabled", caret="hide", timeout=30000)
    return path


#: The page as rendered, read in one round trip: title, visible text (``innerText`` of the body, cut at
#: ``textMax``) and the serialised DOM (what ``page.content()`` returns: the doctype and the root's
#: ``outerHTML``), left out past ``domMax`` characters, with its length.
READ_PAGE_JS = r"""([textMax, domMax]) => {
  if (!document.body) throw new Error("the page has no body yet");
  const text = document.body.innerText;
  const out = {title: document.title, text: text.slice(0, textMax), truncated: text.length > textMax,
               dom: null, domLength: 0, domError: null};
  try {
    let dom = document.doctype ? new XMLSerializer().serializeToString(document.doctype) : "";
    if (document.documentElement) dom += document.documentElement.outerHTML;
    out.domLength = dom.length;
    if (dom.length <= domMax) out.dom = dom;
  } catch (e) {
    out.domError = String(e && e.message || e);
  }
  return out;
}"""


def read_page(page: Any) -> dict[str, Any]:
    """The page's title, visible text and DOM, in one ``page.evaluate``: ``{title, text, truncated, dom,
    domLength, domError}`` (``dom`` None past ``DOM_MAX_CHARS``). A page that cannot be read in one go
    (mid-navigation, no body yet) is read as before, by Playwright's waiting calls one at a time; raises
    what those raise."""
    try:
        got = page.evaluate(READ_PAGE_JS, [PAGE_TEXT_MAX_CHARS, DOM_MAX_CHARS])
        if isinstance(got, dict):
            return got
    except Exception:  # noqa: BLE001 - the waiting path below reads it, or raises the page's error
        pass
    text = str(page.inner_text("body", timeout=5000))
    out: dict[str, Any] = {"title": str(page.title()), "text": text[:PAGE_TEXT_MAX_CHARS],
                           "truncated": len(text) > PAGE_TEXT_MAX_CHARS, "dom": None, "domLength": 0,
                           "domError": None}
    try:
        dom = str(page.content())
    except Exception as e:  # noqa: BLE001 - the text is what judges read; the DOM is kept where it can be
        out["domError"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    else:
        out["domLength"], out["dom"] = len(dom), (dom if len(dom) <= DOM_MAX_CHARS else None)
    return out


def capture_page(page: Any, folder: Path, step: int, *, redact_url: Callable[[str], str] = str) -> str:
    """Keep the page as rendered now (:func:`keep_page`); returns the capture's JSON file relative to ``folder``."""
    keep_page(page, folder, step, redact_url=redact_url)
    return f"pages/step-{step:03d}.json"


def keep_page(page: Any, folder: Path, step: int, *, redact_url: Callable[[str], str] = str) -> PageCapture:
    """Keep the page as rendered now: ``<folder>/pages/step-NNN.json`` (URL, title, visible text after
    scripts ran; :class:`~ego2web_replay.models.PageCapture`) and the DOM beside it as ``step-NNN.html``
    when it is at most ``DOM_MAX_CHARS``, all read in one round trip (:func:`read_page`). ``redact_url``
    turns the page's URL into the one written (the trajectory's redaction, so the capture names its page
    as the step does). Returns the capture as written; raises what Playwright raises when the page
    cannot be read (mid-navigation, crashed)."""
    from datetime import UTC, datetime

    from .models import save_model

    (folder / "pages").mkdir(parents=True, exist_ok=True)
    got = read_page(page)
    capture = PageCapture(step=step, url=redact_url(page.url), title=str(got["title"]), text=str(got["text"]),
                          truncated=bool(got["truncated"]), captured_at=datetime.now(UTC))
    if got["domError"] is not None:
        capture.dom_note = f"DOM not read: {got['domError']}"
    elif got["dom"] is not None:
        capture.dom = f"pages/step-{step:03d}.html"
        (folder / capture.dom).write_text(str(got["dom"]), "utf-8")
    else:
        capture.dom_note = f"DOM of {int(got['domLength']):,} characters not kept (limit {DOM_MAX_CHARS:,})"
    save_model(folder / f"pages/step-{step:03d}.json", capture)
    return capture
