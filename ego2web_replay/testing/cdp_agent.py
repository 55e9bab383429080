"""A real ``command:`` agent that runs its own Chromium and drives it over CDP, asking a model for each action.

Run as ``--agent 'command:python -m ego2web_replay.testing.cdp_agent' --base-url http://127.0.0.1:PORT/v1``
(the endpoint may also be its argument). It shows what a program agent has to do with the environment
``command:`` gives it (see :mod:`ego2web_replay.agents.command`):

* with ``--agent-browser``, connect to the browser it is given (``$EGO2WEB_CDP_URL``,
  already behind the proxy and sealed; ``NO_PROXY`` names its exact port);
* otherwise launch Chromium itself, with ``--proxy-server=$HTTPS_PROXY`` and
  ``--proxy-bypass-list=<-loopback>`` (so a site on 127.0.0.1 goes through the
  replay too), ``--ignore-certificate-errors-spki-list=$EGO2WEB_SPKI``, the flags
  of ``$EGO2WEB_CHROMIUM_ARGS`` and ``about:blank`` as its first page (Debian's
  new-tab page would fetch a search engine), and remote debugging on a free
  port of 127.0.0.1, and add that exact ``127.0.0.1:PORT`` to its own
  ``NO_PROXY``: Playwright's driver honours the proxy variables for
  ``connect_over_cdp``, and a service the program starts itself is not one the
  runner could name;
* reach the model endpoint (``$OPENAI_BASE_URL``, from ``--base-url``) directly:
  ``NO_PROXY`` names its exact ``host:port``;
* each step: send the page's URL, title and text to the OpenAI-compatible
  endpoint (``POST {base}/chat/completions``), read back one JSON action
  (``{"action": "goto"|"click"|"answer", "url"|"text"|"answer": ...}``), do it,
  take a screenshot;
* write ``$EGO2WEB_OUT/trajectory.json`` (our schema) with the steps, the URL
  after each action and the answer.

It uses only the environment and the endpoint; the tests drive it with
``testing.openai_server.FakeOpenAIServer``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

SYSTEM = ("You operate a web browser to complete a task. Each turn you get the task and the current page "
          "(URL, title, visible text). Reply with exactly one JSON object: {\"action\": \"goto\", \"url\": ...}, "
          "{\"action\": \"click\", \"text\": <link or button text>} or {\"action\": \"answer\", \"answer\": ...}.")


def launch_chromium(profile: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start Chromium behind the episode's proxy with remote debugging; return it and its CDP port."""
    proxy = os.environ["EGO2WEB_PROXY"]
    exe = os.environ.get("EGO2WEB_CHROMIUM") or "/usr/lib/chromium/chromium"
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
            "--disable-extensions", f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", f"--proxy-server={proxy}", "--proxy-bypass-list=<-loopback>",
            f"--ignore-certificate-errors-spki-list={os.environ['EGO2WEB_SPKI']}",
            *json.loads(os.environ.get("EGO2WEB_CHROMIUM_ARGS", "[]")), "about:blank"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if port_file.is_file() and port_file.read_text().strip():
            return proc, int(port_file.read_text().split()[0])
        if proc.poll() is not None:
            raise SystemExit(f"chromium exited with code {proc.returncode}")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("chromium did not open its debugging port in 30 s")


def ask(base_url: str, task: dict[str, Any], page: dict[str, str], history: list[str]) -> dict[str, Any]:
    """One chat completion: the task and the page in, one JSON action out."""
    body = {"model": os.environ.get("CDP_AGENT_MODEL", "local"), "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": json.dumps({"task": task["instruction"],
                                                                 "start_url": task["start_url"],
                                                                 "page": page, "done": history})}]}
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer none"})
    with urllib.request.urlopen(req, timeout=60) as r:  # NO_PROXY: straight to the endpoint
        reply = json.load(r)["choices"][0]["message"]["content"]
    return json.loads(reply[reply.index("{"): reply.rindex("}") + 1])


def main(base_url: str) -> int:
    from playwright.sync_api import sync_playwright

    task = json.loads(Path(os.environ["EGO2WEB_TASK_FILE"]).read_text("utf-8"))
    out = Path(os.environ["EGO2WEB_OUT"])
    (out / "screenshots").mkdir(parents=True, exist_ok=True)
    max_steps = int(os.environ.get("EGO2WEB_MAX_STEPS", "10"))
    profile = Path(tempfile.mkdtemp(prefix="cdp-agent-"))
    chromium = None
    if os.environ.get("EGO2WEB_CDP_URL"):  # the browser the runner gives it (--agent-browser)
        cdp_url = os.environ["EGO2WEB_CDP_URL"]
    else:
        chromium, port = launch_chromium(profile)
        cdp_url = f"http://127.0.0.1:{port}"
        for name in ("NO_PROXY", "no_proxy"):  # its own service, started by itself: it routes it itself
            os.environ[name] = ",".join(x for x in (os.environ.get(name), f"127.0.0.1:{port}") if x)
    steps: list[dict[str, Any]] = []
    answer = None
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.connect_over_cdp(cdp_url)
            page = browser.contexts[0].pages[0]
            for i in range(max_steps):
                seen = {"url": page.url, "title": page.title(),
                        "text": page.inner_text("body")[:2000] if page.url != "about:blank" else ""}
                action = ask(base_url, task, seen, [json.dumps(s["action"]) for s in steps])
                kind = action.get("action")
                if kind == "answer":
                    answer = str(action.get("answer", ""))
                    steps.append({"index": i, "action": {"kind": "answer", "answer": answer}, "url": page.url})
                    break
                if kind == "goto":
                    page.goto(action["url"], wait_until="networkidle", timeout=20000)
                    step = {"kind": "goto", "url": action["url"]}
                elif kind == "click":
                    page.get_by_text(action["text"], exact=False).first.click(timeout=10000)
                    page.wait_for_load_state("networkidle")
                    step = {"kind": "click", "text": action["text"]}
                else:
                    raise SystemExit(f"the model asked for an unknown action {kind!r}")
                shot = f"screenshots/step-{i:03d}.png"
                page.screenshot(path=str(out / shot))
                steps.append({"index": i, "action": step, "url": page.url, "title": page.title(), "screenshot": shot})
            browser.close()
    finally:
        if chromium is not None:
            chromium.kill()
            chromium.wait()
        shutil.rmtree(profile, ignore_errors=True)
    result = {"steps": steps, "answer": answer, "end_reason": "answered" if answer is not None else "step_budget"}
    (out / "trajectory.json").write_text(json.dumps(result), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.environ["OPENAI_BASE_URL"]))
