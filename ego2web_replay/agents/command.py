"""``command:<program>``: any program, in any language, evaluated through our proxy.

The program is started (through the shell) with these environment variables:

==========================  ==================================================
``HTTP_PROXY``/``HTTPS_PROXY``  the proxy URL (also lowercase and ``ALL_PROXY``)
``NO_PROXY``                the exact ``host:port`` of each of the program's own
                            services, which never go through the proxy: the
                            model endpoint (``--base-url``, else an inherited
                            ``$OPENAI_BASE_URL``), each ``--agent-service`` and
                            the DevTools port of the browser it is given; nothing
                            host-wide (see :mod:`.routing`); also ``no_proxy``
                            and ``EGO2WEB_NO_PROXY``
``OPENAI_BASE_URL``         the model endpoint given with ``--base-url`` (also
                            ``EGO2WEB_AGENT_BASE_URL``)
``EGO2WEB_CDP_URL``         with ``--agent-browser``: ``http://127.0.0.1:PORT``, the
                            DevTools endpoint of a sealed Chromium behind the
                            proxy started for it (:mod:`.given_browser`)
``EGO2WEB_PROXY``           the proxy URL
``EGO2WEB_CA_FILE``         the proxy CA's certificate (PEM); also ``SSL_CERT_FILE``,
                            ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``
``EGO2WEB_SPKI``            the CA's SPKI pin, for Chromium's
                            ``--ignore-certificate-errors-spki-list``
``EGO2WEB_CHROMIUM_ARGS``   a JSON list of the flags a Chromium it launches must
                            add to stay sealed (no WebRTC UDP, no own DNS;
                            see ``docs/sealing.md``)
``EGO2WEB_TASK_FILE``       the task as JSON
``EGO2WEB_OUT``             a folder to write the trajectory into
``EGO2WEB_MODE``            ``live`` or ``frozen``
``EGO2WEB_REPEAT``          the repeat index (0 .. K-1 under ``run --repeats K``)
``EGO2WEB_MAX_STEPS``       the step budget
``EGO2WEB_MODALITY``        the input modality (video, keyframes, captions, none)
``EGO2WEB_INPUTS``          a JSON file: ``modality``, ``video`` (path or null),
                            ``frames`` (``[{t, path}]``, from the whole video),
                            ``captions`` (lines)
``EGO2WEB_VIDEO``           the video file (``video`` modality only)
==========================  ==================================================

The runner hands every path among them inside the episode's private folder of
copies (:mod:`ego2web_replay.runner.agent_folder`), never a path into the
suite, the frames cache or the run.

It writes ``$EGO2WEB_OUT/trajectory.json`` (our schema; ``task_id``, ``mode``
and ``agent`` may be left out) or ``$EGO2WEB_OUT/history.json`` (browser-use's
``AgentHistoryList``), or at least ``$EGO2WEB_OUT/answer.txt``. Its exit code and
the tail of its stderr are kept in ``trajectory.extra``, and so is what bypassed
the proxy (``extra["routing"]``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..browser import sealed_chromium_args
from ..lifeline import preexec_die_with_parent
from ..models import Action, AgentSpec, Step, Task, Trajectory
from .base import EpisodeEnv
from .browser_use import convert_browser_use_history, final_error
from .routing import OwnService, Routing, parse_destination, plan_routing

__all__ = ["CommandAgent"]

log = logging.getLogger(__name__)

STDERR_TAIL = 4000


class CommandAgent:
    """Runs ``program`` once per episode; see the module docstring for its contract."""

    def __init__(self, program: str, *, base_url: str | None = None, services: Sequence[str] = (),
                 browser: bool = False, sandbox: str = "auto") -> None:
        """``base_url``: the program's model endpoint (handed as ``$OPENAI_BASE_URL``); ``services``: other
        services of its own (URLs or ``host:port``); ``browser``: give it a sealed Chromium over CDP.
        All of them are reached directly, never through the proxy. ``sandbox``: seal the program in
        namespaces of its own (:mod:`.sandbox`): ``auto`` where this machine allows it, ``on`` (an
        episode that cannot be sealed does not run), ``off``."""
        if sandbox not in ("auto", "on", "off"):
            from ..errors import AgentError

            raise AgentError(f"the agent sandbox is auto, on or off, not {sandbox!r}")
        self.sandbox = sandbox
        if not program.strip():
            from ..errors import AgentError

            raise AgentError("command agent needs a program, e.g. --agent 'command:python my_agent.py'")
        self.program = program
        self.base_url = base_url
        self.services = list(services)
        self.browser = browser
        self.own_services()  # a bad address is one error before any episode
        settings: dict[str, Any] = {"program": program}
        if base_url:
            settings["base_url"] = base_url
        if self.services:
            settings["services"] = self.services
        if browser:
            settings["browser"] = True
        self.spec = AgentSpec(name="command", settings=settings, input_modality="video")
        self.routing: Routing | None = None  # the current episode's

    def own_services(self) -> list[OwnService]:
        """The program's own services known before it starts: its model endpoint and ``services``."""
        found: list[OwnService] = []
        if self.base_url:
            found.append(OwnService(parse_destination(self.base_url), "model endpoint (--base-url)"))
        elif os.environ.get("OPENAI_BASE_URL"):  # the program inherits it, and an OpenAI client reads it
            found.append(OwnService(parse_destination(os.environ["OPENAI_BASE_URL"]),
                                    "model endpoint ($OPENAI_BASE_URL)"))
        found += [OwnService(parse_destination(s), "service (--agent-service)") for s in self.services]
        return found

    def plan(self, env: EpisodeEnv, extra: Sequence[OwnService] = ()) -> Routing:
        """This episode's routing (:func:`~.routing.plan_routing`; :class:`AgentError` on a collision)."""
        return plan_routing(env.proxied, [*self.own_services(), *extra], proxied_from=env.proxied_from)

    def environment(self, env: EpisodeEnv) -> dict[str, str]:
        # the runner's own places (its data home, its database) are nothing the program needs
        out = {k: v for k, v in os.environ.items() if k not in _RUNNER_ONLY}
        ca = str(env.ca_file)
        out.update({
            "HTTP_PROXY": env.proxy_url, "HTTPS_PROXY": env.proxy_url, "http_proxy": env.proxy_url,
            "https_proxy": env.proxy_url, "ALL_PROXY": env.proxy_url,
            "EGO2WEB_PROXY": env.proxy_url, "EGO2WEB_CA_FILE": ca, "SSL_CERT_FILE": ca,
            "REQUESTS_CA_BUNDLE": ca, "CURL_CA_BUNDLE": ca, "NODE_EXTRA_CA_CERTS": ca,
            "EGO2WEB_SPKI": env.spki, "EGO2WEB_TASK_FILE": str(env.task_file), "EGO2WEB_OUT": str(env.out_dir),
            "EGO2WEB_MODE": env.mode, "EGO2WEB_MAX_STEPS": str(env.max_steps), "EGO2WEB_REPEAT": str(env.repeat),
            "EGO2WEB_MODALITY": self.spec.input_modality,
            "EGO2WEB_CHROMIUM_ARGS": json.dumps(sealed_chromium_args(env.proxy_url)),
        })
        routing = self.routing or self.plan(env)
        bypass = routing.no_proxy()
        out.update({"NO_PROXY": bypass, "no_proxy": bypass, "EGO2WEB_NO_PROXY": bypass})
        if self.base_url:
            out.update({"OPENAI_BASE_URL": self.base_url, "EGO2WEB_AGENT_BASE_URL": self.base_url})
        cdp = [s for s in routing.direct if s.what == CDP_SERVICE]
        if cdp:
            out["EGO2WEB_CDP_URL"] = f"http://{cdp[0].destination}"
        if env.inputs is not None:
            out["EGO2WEB_INPUTS"] = str(env.inputs)
            try:
                video = json.loads(env.inputs.read_text("utf-8")).get("video")
            except (OSError, ValueError):
                video = None
            if video:
                out["EGO2WEB_VIDEO"] = video
        return out

    def run_episode(self, task: Task, env: EpisodeEnv) -> Trajectory:
        env.out_dir.mkdir(parents=True, exist_ok=True)
        started = datetime.now(UTC)
        t0 = time.monotonic()
        base = Trajectory(task_id=task.id, instruction=task.instruction, mode=env.mode,  # type: ignore[arg-type]
                          agent=self.spec, started_at=started)
        with ExitStack() as stack:
            seal = self._seal_plan(stack, env)
            extra_services: list[OwnService] = []
            if self.browser:
                from .given_browser import GivenBrowser

                cover = (seal["covered"], Path(seal["scratch"])) if seal["sealed"] else None
                given = stack.enter_context(GivenBrowser(env.proxy_url, env.spki, cover=cover))
                extra_services.append(OwnService(parse_destination(given.cdp_url), CDP_SERVICE))
            self.routing = self.plan(env, extra_services)
            try:
                program, sealed = self._sealed(stack, env, self.routing, seal)
                returncode, stderr = _run_program(program, self.environment(env), env.timeout_s)
            finally:
                routing, self.routing = self.routing, None
        base.extra["routing"] = routing.record()
        base.extra["sandbox"] = sealed
        if returncode == 125 and _SETUP_FAILED in stderr:  # the sandbox could not be set up
            base.end_reason = "setup_error"
            base.error = _last_line(stderr)
            base.extra.update({"exit_code": returncode, "stderr": _tail(stderr)})
            base.finished_at = datetime.now(UTC)
            return base
        if returncode is None:
            base.end_reason = "timeout"
            base.error = f"the program ran past the episode timeout ({env.timeout_s:g} s) and was killed"
            base.extra.update({"exit_code": None, "stderr": _tail(stderr)})
            base.finished_at = datetime.now(UTC)
            return base
        extra: dict[str, Any] = {"exit_code": returncode, "stderr": _tail(stderr),
                                 "duration_s": round(time.monotonic() - t0, 3), "routing": routing.record(),
                                 "sandbox": sealed}
        traj = self._read_output(task, env, base)
        traj.extra.update(extra)
        traj.finished_at = datetime.now(UTC)
        if returncode != 0:
            # the exit code comes first: "wrote no trajectory" alone would hide why
            reason = f"the program exited with code {returncode}"
            last = _last_line(stderr)
            if last:
                reason += f" ({last})"
            traj.end_reason = "agent_error"
            traj.error = f"{reason}; {traj.error}" if traj.error else reason
        return traj

    def _seal_plan(self, stack: ExitStack, env: EpisodeEnv) -> dict[str, Any]:
        """Whether the program is sealed (:mod:`.sandbox`) and, if so, what is covered: the evidence's places
        but those holding what it needs (where it runs, what it is handed, the files its command line
        names: its script, its config), listed as uncovered; and the runner's folder the covers and the
        bridges are made in (removed when the episode ends)."""
        from .sandbox import sandbox_unavailable

        if self.sandbox == "off":
            return {"sealed": False, "why": "--agent-sandbox off"}
        why = sandbox_unavailable()
        if why is not None:
            return self._unsealed(why)
        # short: a Unix socket's path holds at most 107 bytes
        scratch = Path(tempfile.mkdtemp(prefix="e2w-", dir=_short_tmp()))
        stack.callback(shutil.rmtree, scratch, ignore_errors=True)
        needed = [Path.cwd().resolve(), env.out_dir.resolve().parent, scratch, *_named_files(self.program)]
        covered: list[str] = []
        uncovered: list[str] = []
        places: list[str | Path] = list(env.hidden)
        for path in dict.fromkeys(str(Path(p).resolve()) for p in places):
            if any(n == Path(path) or Path(path) in n.parents for n in needed):
                uncovered.append(path)
            elif Path(path).exists():
                covered.append(path)
        # what it needs of the shared folders: the folders of the files it names too (a script reads its
        # siblings), and the folders its environment names for it (its own TMPDIR, config and cache, HOME)
        own = self.environment(env)
        keep = [str(p) for p in (*needed, *(f if f.is_dir() else f.parent for f in _named_files(self.program)),
                                 Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
                                 Path(__file__).resolve().parents[2],
                                 *(Path(own[k]).resolve() for k in _OWN_PLACES if own.get(k)))]
        return {"sealed": True, "covered": covered, "uncovered": uncovered, "scratch": str(scratch), "keep": keep}

    def _unsealed(self, why: str) -> dict[str, Any]:
        if self.sandbox == "on":
            from ..errors import AgentError

            raise AgentError(f"--agent-sandbox on, but the program cannot be sealed here: {why}")
        _warn_unsealed(why)
        return {"sealed": False, "why": why}

    def _sealed(self, stack: ExitStack, env: EpisodeEnv, routing: Routing,
                seal: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The command line that runs the program (sealed where :meth:`_seal_plan` says so, with bridges to
        the proxy and its own services) and what the trajectory records of that: sealed or not and why, the
        destinations it can reach, the paths covered and those left uncovered."""
        from .sandbox import Bridges, describe, sandboxed_command

        if not seal["sealed"]:
            return self.program, seal
        proxy = parse_destination(env.proxy_url)
        reached = [(proxy.host, proxy.port)] + [(s.destination.host, s.destination.port) for s in routing.direct]
        scratch = Path(seal["scratch"])
        try:
            bridges = stack.enter_context(Bridges(scratch / "bridges", reached))
        except OSError as e:  # a service whose name does not resolve here, a socket that cannot be made
            return self.program, self._unsealed(f"its destinations cannot be bridged: {e}")
        record = {"sealed": True, "reached": describe(bridges.destinations), "covered": seal["covered"]}
        if seal["uncovered"]:
            record["uncovered"] = seal["uncovered"]  # (they hold its working folder or its own: shown, never silent)
        command = sandboxed_command(self.program, bridges.destinations, seal["covered"], scratch, seal["keep"])
        return shlex.join(command), record

    def _read_output(self, task: Task, env: EpisodeEnv, base: Trajectory) -> Trajectory:
        out = env.out_dir
        ours, history, answer = out / "trajectory.json", out / "history.json", out / "answer.txt"
        try:
            if ours.exists():
                data = json.loads(ours.read_text("utf-8"))
                if not isinstance(data, dict):
                    raise ValueError("trajectory.json is not a JSON object")
                data.update({"task_id": task.id, "mode": env.mode, "agent": self.spec.model_dump(),
                             "instruction": task.instruction})
                data.setdefault("started_at", base.started_at.isoformat() if base.started_at else None)
                traj = Trajectory.model_validate(data)
                if traj.end_reason == "no_actions" and traj.answer is not None:
                    traj.end_reason = "answered"
                if traj.episode_error:  # only the runner says an episode could not run: an agent that
                    # did would have its failure left out of every rate (and re-run by --resume)
                    claimed = traj.end_reason
                    traj.end_reason = "agent_error"
                    note = f"the program's trajectory.json said end_reason {claimed!r}, which only the runner sets"
                    traj.error = f"{note}; {traj.error}" if traj.error else note
                return traj
            if history.exists():
                data = json.loads(history.read_text("utf-8"))
                steps, answer_text = convert_browser_use_history(data, out)
                base.steps = steps
                base.answer = answer_text
                base.end_reason = "answered" if answer_text is not None else ("stopped" if steps else "no_actions")
                ended = final_error(data)
                if answer_text is None and ended:
                    base.error = ended
                    if "maximum steps" in ended:  # browser-use's own words for running out of steps
                        base.end_reason = "step_budget"
                base.extra["format"] = "browser-use"
                return base
            if answer.exists():
                base.answer = answer.read_text("utf-8").strip()
                base.steps = [Step(index=0, action=Action(kind="answer", answer=base.answer))]
                base.end_reason = "answered"
                return base
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(map(str, first["loc"])) or "(top level)"
            base.end_reason = "agent_error"
            base.error = f"the program wrote an invalid trajectory: {where}: {first['msg']}"
            return base
        except (ValueError, json.JSONDecodeError) as e:
            base.end_reason = "agent_error"
            base.error = f"the program wrote an unreadable trajectory: {str(e).splitlines()[0]}"
            return base
        base.end_reason = "agent_error"
        base.error = "the program wrote no trajectory.json, history.json or answer.txt in $EGO2WEB_OUT"
        return base


#: what the given browser's DevTools endpoint is called among the program's own services
CDP_SERVICE = "DevTools endpoint of the browser it is given (--agent-browser)"


#: what the runner's environment says of its own places: not handed on to a program
_RUNNER_ONLY = frozenset({"EGO2WEB_REPLAY_HOME", "EGO2WEB_REPLAY_DB"})
_WARNED: set[str] = set()


def _named_files(program: str) -> list[Path]:
    """The files and folders a command line names that exist (``python /x/agent.py --config c.json``: the
    script and its config): a sealed program needs them, so no cover goes over them."""
    try:
        words = shlex.split(program)
    except ValueError:
        words = program.split()
    found = []
    for word in words:
        for part in (word, word.partition("=")[2]):  # (--config=c.json)
            if part and not part.startswith("-") and len(part) < 4096:
                with contextlib.suppress(OSError, ValueError):
                    path = Path(part).expanduser()
                    if path.exists():
                        found.append(path.resolve())
    return found


#: environment variables naming a program's own places, kept visible to it when sealed
_OWN_PLACES = ("TMPDIR", "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
               "BROWSER_USE_CONFIG_DIR")
_SETUP_FAILED = b"ego2web-replay sandbox: cannot set up"  # (sandbox.SETUP_FAILED; not imported: it runs as -m)


def _short_tmp() -> str:
    """The temporary folder, or /tmp where its path is too long for Unix sockets made in it."""
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) <= 60 else "/tmp"


def _warn_unsealed(why: str) -> None:
    if why not in _WARNED:
        _WARNED.add(why)
        log.warning("command agents run unsealed (their own network and files): %s", why)


def _run_program(program: str, env: dict[str, str], timeout_s: float) -> tuple[int | None, bytes]:
    """Run ``program`` through the shell in its own process group; ``(None, stderr)`` on timeout.

    Output goes to temporary files, not pipes, so a background child that keeps
    them open cannot hang the runner; whatever the program leaves running (or
    is still running at the timeout) is killed with its whole process group.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(program, shell=True, env=env, cwd=os.getcwd(), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=preexec_die_with_parent)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # (an interrupted run too: nothing of the program outlives its episode)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        err.seek(0)
        return code, err.read()


def _tail(data: bytes | str | None) -> str:
    if not data:
        return ""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return text[-STDERR_TAIL:]


def _last_line(data: bytes | str | None, limit: int = 200) -> str:
    lines = [line.strip() for line in _tail(data).splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""
