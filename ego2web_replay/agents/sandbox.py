"""A program agent sealed in namespaces of its own: it reaches the proxy and its own services, nothing else.

A ``command:`` agent is a program of its own (a shell script, a Node or Python agent, a browser it
launches itself); the runner hands it a proxy and a private folder, but a program can ignore the proxy
(``curl --noproxy '*'``, a UDP datagram, its own DNS lookups) and read whatever its user can (the suite
with its answers, the run's other episodes, the snapshots, the data home). Where Linux user namespaces
are allowed (``unshare --user``, no privilege needed), the runner starts it inside new namespaces
(:func:`sandboxed_command`):

* **network**: a namespace with only its loopback interface. Each destination the program may reach
  (the episode's proxy, and the services of its own that routing sends direct: its model endpoint, a
  browser given over CDP) is listened for inside, on the same address and port, and carried over a
  Unix socket (the file system is shared) to a bridge in the runner (:class:`Bridges`), which
  connects to the real one. A name such a service is reached by is written into the namespace's
  ``/etc/hosts`` and its address added to the loopback interface. Nothing else has a route: no
  other TCP, no UDP, no DNS (for a Unix socket of the machine, see below);
* **mount**: the folders and files that hold the evidence (the suite, the run folders, the snapshots,
  the data home and its caches, the tracking database) are covered, each by an empty read-only
  folder (a file by an empty one), in the program's view only;
* **pid**: the program sees its own processes only (``/proc`` mounted anew): not the runner's command
  line, environment or open files;
* **Unix sockets**: ``/run`` is an empty tmpfs (the machine's service sockets), and in ``/tmp`` and
  ``/var/tmp`` every socket and every folder named as this project's, other episodes' bridges and
  sessions' are (:data:`_TEMP_PREFIXES`) is covered, but for what the program needs.

The browser a sealed program is given (``--agent-browser``) starts through :func:`covered_command`: a user
and mount namespace with the same covers (its network the machine's, behind the proxy).

The program runs as the namespace's root (your user outside) with no capability it could use to undo
any of it: its bounding set is emptied and it may gain no new privileges.

Inside, :func:`main` (``python -m ego2web_replay.agents.sandbox``) does that set-up as the namespace's
first process, runs the program, and ends with its exit code; the namespace's processes end with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import functools
import ipaddress
import json
import os
import shlex
import socket
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Bridges", "SETUP_FAILED", "SHARED", "covered_command", "sandbox_unavailable", "sandboxed_command", "main"]

_UNSHARE = ("unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--mount-proc",
            "--kill-child")


@functools.lru_cache(maxsize=1)
def sandbox_unavailable() -> str | None:
    """Why programs cannot be sealed here (no ``unshare``, user namespaces not allowed), or None."""
    try:
        done = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=30, check=False)
    except FileNotFoundError:
        return "no unshare command (util-linux)"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"user namespaces are not allowed here ({why[-1] if why else f'exit {done.returncode}'})"
    return None


@dataclass(frozen=True)
class Destination:
    """A place the sealed program may reach: as the program names it (``host``, ``port``), the address
    it is listened for at inside (``address``), and the Unix socket that carries it out."""

    host: str
    port: int
    address: str
    socket: str


class Bridges:
    """The runner's side: a Unix socket per destination in ``folder``; each connection to it is joined to a
    new TCP connection to the destination (an asyncio loop in a thread of its own). A context manager."""

    def __init__(self, folder: Path, destinations: Sequence[tuple[str, int]]) -> None:
        self.folder = folder
        self.targets: list[tuple[Destination, tuple[str, int]]] = []
        seen: set[tuple[str, int]] = set()
        for host, port in destinations:  # (OSError: a name that does not resolve; the caller says so)
            address = _address_of(host)
            if (address, port) in seen:  # localhost:P and 127.0.0.1:P: one listener inside serves both
                continue
            seen.add((address, port))
            path = str(folder / f"b{len(self.targets)}.sock")
            if len(path.encode()) > 100:
                raise OSError(f"the bridge's socket path is too long for a Unix socket: {path}")
            self.targets.append((Destination(host, port, address, path), (address, port)))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []

    @property
    def destinations(self) -> list[Destination]:
        return [d for d, _ in self.targets]

    def __enter__(self) -> Bridges:
        self.folder.mkdir(parents=True, exist_ok=True)
        loop = self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[BaseException] = []

        async def start() -> None:
            for dest, target in self.targets:
                self._servers.append(await asyncio.start_unix_server(
                    functools.partial(_join_to, target), path=dest.socket))

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(start())
            except BaseException as e:  # noqa: BLE001 - handed to the starting thread
                failed.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="agent-bridges", daemon=True)
        self._thread.start()
        if not ready.wait(10) or failed:
            self.__exit__()
            raise OSError(f"the sandbox's bridges did not start: {failed[0] if failed else 'no answer in 10 s'}")
        return self

    def __exit__(self, *exc: object) -> None:
        loop = self._loop
        if loop is None:
            return

        async def stop() -> None:
            for server in self._servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if loop.is_running():
            with contextlib.suppress(RuntimeError, TimeoutError):
                asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        if not loop.is_running():
            loop.close()
        self._loop = None


def _address_of(host: str) -> str:
    """The IPv4 address a destination's host names (a name resolved here, where names resolve)."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host.strip("[]")))
    return str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _join(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                other_reader: asyncio.StreamReader, other_writer: asyncio.StreamWriter) -> None:
    try:
        await asyncio.gather(_pipe(reader, other_writer), _pipe(other_reader, writer))
    finally:
        for w in (writer, other_writer):
            w.close()


async def _join_to(target: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError:
        writer.close()
        return
    await _join(reader, writer, up_reader, up_writer)


#: shared folders covered whole in a sealed program's view (every Unix socket of the machine's services:
#: docker, nscd, the resolver, D-Bus), but for what it needs of them
SHARED = ("/run",)
#: in the temporary folders, what is covered: other episodes' and runners' folders and bridges (this
#: project's names), and the sockets of sessions and agents (ssh, tmux, X11, D-Bus, PulseAudio, systemd)
_TEMP = ("/tmp", "/var/tmp")
_TEMP_PREFIXES = ("ego2web-", "e2w-", "ray-", "ssh-", "tmux-", ".X11-unix", ".ICE-unix", ".XIM-unix", ".font-unix",
                  "dbus-", "pulse-", "systemd-private-", "pymp-")


def sandboxed_command(program: str, destinations: Sequence[Destination], hidden: Sequence[str],
                      scratch: Path, keep: Sequence[str]) -> list[str]:
    """The command that runs ``program`` (a shell command line) sealed: ``unshare`` into new user, network,
    mount and pid namespaces, then :func:`main` with what it is to set up. ``scratch``: an empty folder of
    the runner's (what the covers are made of; it removes it); ``keep``: what the program needs of the
    shared folders (its private folder, its working folder, the bridges, its interpreter)."""
    plan = {"destinations": [d.__dict__ for d in destinations], "hidden": list(hidden), "program": program,
            "scratch": str(scratch), "keep": list(keep)}
    return [*_UNSHARE, sys.executable, "-m", "ego2web_replay.agents.sandbox", json.dumps(plan)]


def covered_command(argv: Sequence[str], hidden: Sequence[str], scratch: Path) -> list[str]:
    """``argv`` started in a user and mount namespace of its own with ``hidden`` covered (its network the
    machine's): the browser a sealed program is given (``--agent-browser``) reads no file the program may
    not (a ``file://`` page of the suite, say)."""
    plan = {"hidden": list(hidden), "scratch": str(scratch), "exec": list(argv)}
    return ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-m", "ego2web_replay.agents.sandbox",
            json.dumps(plan)]


# -- inside the namespaces ------------------------------------------------------

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _SIOCSIFADDR, _IFF_UP = 0x8913, 0x8914, 0x8916, 0x1
_MS_RDONLY, _MS_BIND, _MS_REMOUNT, _MS_REC = 1, 4096, 32, 16384


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def _add_address(address: str, n: int) -> None:
    """``address`` on an alias of the loopback interface, so that it can be listened at here."""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback:
        return  # 127.0.0.0/8 and ::1 are the loopback's already
    if ip.version == 6:
        subprocess.run(["ip", "-6", "addr", "add", f"{address}/128", "dev", "lo"], check=True,
                       capture_output=True)
        return
    name = f"lo:{n}".encode()
    sockaddr = struct.pack("HH4s8x", socket.AF_INET, 0, socket.inet_aton(address))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, _SIOCSIFADDR, struct.pack("16s16s", name, sockaddr))


def _mount(source: str, target: str, fstype: str | None, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _cover(path: str, empty: Path) -> None:
    """Cover ``path`` (a folder or a file) with an empty, read-only one, in this mount namespace."""
    p = Path(path)
    if not p.exists():
        return
    source = empty / ("dir" if p.is_dir() else "file")
    _mount(str(source), path, None, _MS_BIND)
    _mount(str(source), path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)


def _hosts(destinations: Sequence[dict[str, Any]], folder: Path) -> None:
    """An ``/etc/hosts`` of this namespace naming each destination reached by name."""
    named = [(d["address"], d["host"]) for d in destinations if d["host"].strip("[]") != d["address"]]
    if not named:
        return
    hosts = folder / "hosts"
    lines = ["127.0.0.1 localhost", "::1 localhost"] + [f"{a} {h}" for a, h in named]
    hosts.write_text("\n".join(lines) + "\n", "utf-8")
    _mount(str(hosts), "/etc/hosts", None, _MS_BIND)


async def _listen(destinations: Sequence[dict[str, Any]]) -> list[asyncio.AbstractServer]:
    async def carry(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            out_reader, out_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        await _join(reader, writer, out_reader, out_writer)

    return [await asyncio.start_server(functools.partial(carry, d["socket"]), d["address"], d["port"])
            for d in destinations]


def main(argv: Sequence[str] | None = None) -> int:
    """The namespace's first process: set up (loopback, listeners, covers, hosts), run the program, exit
    with its exit code; with ``exec`` in the plan, cover and become that command (the given browser)."""
    plan = json.loads((argv if argv is not None else sys.argv[1:])[0])
    scratch = Path(plan["scratch"])
    try:
        if "exec" in plan:
            _covers(plan["hidden"], scratch)
            os.execv(plan["exec"][0], plan["exec"])
        destinations = plan["destinations"]
        _loopback_up()
        for n, d in enumerate(destinations):
            _add_address(d["address"], n + 1)
        _hosts(destinations, scratch)
        _covers(plan["hidden"], scratch)
        _cover_temp(plan["keep"], scratch)
        _share_only(plan["keep"])
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_listen(destinations))
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"{SETUP_FAILED}: {e}", file=sys.stderr)
        return 125
    threading.Thread(target=loop.run_forever, name="sandbox-listeners", daemon=True).start()
    done = subprocess.run(["/bin/sh", "-c", plan["program"]], check=False, preexec_fn=_no_privileges)
    return done.returncode


#: what the namespace's first process says when it could not set up (exit 125): the episode could not run
SETUP_FAILED = "ego2web-replay sandbox: cannot set up"


def _covers(hidden: Sequence[str], scratch: Path) -> None:
    (scratch / "dir").mkdir(exist_ok=True)
    (scratch / "file").touch()
    for path in hidden:
        _cover(path, scratch)


def _cover_temp(keep: Sequence[str], scratch: Path) -> None:
    """In the temporary folders, each entry of :data:`_TEMP_PREFIXES` (or a socket) that is not one of ``keep``
    nor holds one: covered."""
    for root in _TEMP:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            path = os.path.join(root, name)
            if any(k == path or k.startswith(path + "/") for k in keep):
                continue
            try:
                is_socket = stat.S_ISSOCK(os.lstat(path).st_mode)
            except OSError:
                continue
            if (is_socket or name.startswith(_TEMP_PREFIXES)) and not os.path.islink(path):
                _cover(path, scratch)  # (a socket, as a file is: an empty file over it)


def _share_only(keep: Sequence[str]) -> None:
    """Each of :data:`SHARED` replaced by an empty tmpfs holding only the ``keep`` paths in it, bound back
    from the folders they were (with the covers inside them) through descriptors opened before."""
    held: list[tuple[str, int]] = []
    for path in dict.fromkeys(keep):
        if any(path == root or path.startswith(root + "/") for root in SHARED) and os.path.exists(path):
            held.append((path, os.open(path, os.O_PATH)))
    for root in SHARED:
        if os.path.isdir(root) and not os.path.islink(root):
            _mount("tmpfs", root, "tmpfs", 0)
            os.chmod(root, 0o1777)
    for path, fd in sorted(held, key=lambda h: h[0].count("/")):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).touch()
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        os.close(fd)


def _no_privileges() -> None:
    """In the program's process before it starts: no capability can be held again (the bounding set
    emptied, no new privileges), so the root of this user namespace cannot undo a cover or a route."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last capability: nothing to drop)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "cannot set no_new_privs")


def describe(destinations: Sequence[Destination]) -> str:
    """The destinations, as the trajectory records them."""
    return ", ".join(shlex.quote(f"{d.host}:{d.port}") for d in destinations)


if __name__ == "__main__":
    sys.exit(main())
