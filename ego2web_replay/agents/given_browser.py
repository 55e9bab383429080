"""The browser the runner gives a program agent (``run --agent command:... --agent-browser``).

Debian's Chromium, started before the program with everything that keeps it
behind the episode's proxy and sealed: ``--proxy-server`` with the loopback
bypass removed (``--proxy-bypass-list=<-loopback>``, so a site on 127.0.0.1 is
read through the proxy too), the project CA's SPKI pin, the quiet flags and
:func:`~ego2web_replay.browser.sealed_chromium_args`, a fresh profile, and
``about:blank`` as its only page (Debian's new-tab page would fetch a search
engine). Its DevTools endpoint listens on ``127.0.0.1`` on a port Chromium
picks; the program is handed ``http://127.0.0.1:PORT`` as ``$EGO2WEB_CDP_URL``
and that exact ``host:port`` is one of its own services
(:mod:`~ego2web_replay.agents.routing`): its CDP client connects directly, never
through the proxy, so a plain browser-use script
(``BrowserSession(cdp_url=os.environ["EGO2WEB_CDP_URL"])``) or Playwright's
``connect_over_cdp`` needs nothing else. The browser is killed, with its
profile, when the episode ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ..browser import CHROMIUM_FLAGS, chromium_executable, sealed_chromium_args
from ..errors import BrowserError
from ..lifeline import preexec_die_with_parent

__all__ = ["GivenBrowser", "given_browser_args"]

START_TIMEOUT_S = 30.0


def given_browser_args(proxy_url: str, spki: str, profile: Path, *, headless: bool = True) -> list[str]:
    """The Chromium command line of the given browser (without the executable)."""
    args = [*CHROMIUM_FLAGS, *sealed_chromium_args(proxy_url), f"--proxy-server={proxy_url}",
            "--proxy-bypass-list=<-loopback>", f"--ignore-certificate-errors-spki-list={spki}",
            f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            "--window-size=1280,800"]
    if headless:
        args.append("--headless")
    return [*args, "about:blank"]


class GivenBrowser:
    """A running Chromium behind ``proxy_url`` with its DevTools endpoint at :attr:`cdp_url`."""

    def __init__(self, proxy_url: str, spki: str, *, headless: bool = True,
                 cover: tuple[list[str], Path] | None = None) -> None:
        """``cover``: the places a sealed program may not read and the runner's folder to make the covers
        of (:func:`~.sandbox.covered_command`): the browser it is given reads none of them either."""
        self.proxy_url, self.spki, self.headless, self.cover = proxy_url, spki, headless, cover
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile: Path | None = None

    @property
    def cdp_url(self) -> str:
        if self.port is None:
            raise BrowserError("the given browser is not running")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GivenBrowser:
        self._profile = Path(tempfile.mkdtemp(prefix="ego2web-given-browser-"))
        cmd = [chromium_executable(), *given_browser_args(self.proxy_url, self.spki, self._profile,
                                                          headless=self.headless)]
        if self.cover is not None:
            from .sandbox import covered_command

            cmd = covered_command(cmd, *self.cover)
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True,
                                      preexec_fn=preexec_die_with_parent)
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = port_file.read_text("utf-8") if port_file.is_file() else ""
            if text.strip():
                self.port = int(text.split()[0])
                return self
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.stop()
                raise BrowserError(f"the agent's browser (Chromium) exited at start with code {code}")
            time.sleep(0.05)
        self.stop()
        raise BrowserError(f"the agent's browser (Chromium) opened no DevTools port in {START_TIMEOUT_S:g} s")

    def stop(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
            self._proc = None
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None
        self.port = None

    def __enter__(self) -> GivenBrowser:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
