"""``ego2web-replay serve``: a hermetic replay proxy for any client."""

from __future__ import annotations

import shlex
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import ReplayError
from ._options import LOCATION, Finite
from .replay_options import replay_options
from .wire_options import wire_options

if TYPE_CHECKING:
    from ..models import ReplayConfig
    from ..wire.budget import WireLimits


def _connect_help(replay) -> str:  # noqa: ANN001
    from ..browser import sealed_chromium_args

    p, ca, pin = replay.proxy_url, replay.ca_file, replay.spki
    seal = " ".join(shlex.quote(a) for a in sealed_chromium_args(p))
    fuzzy = "; nearest capture ON (--fuzzy: such answers are counted as fuzzy)" if replay.config.fuzzy else ""
    n = len(replay.shared.suite.sources) if replay.shared else 0
    shared = (f"\nshared         {n} other {'task' if n == 1 else 'tasks'}' snapshot{'' if n == 1 else 's'} within "
              f"{replay.config.share_window_s:g} s answer what these lack (counted as shared; --no-share: off)"
              if replay.shared else "")
    return f"""\
replay proxy   {p}
CA file        {ca}
CA SPKI pin    {pin}
captures       {replay.captures} from {len(replay.paths)} snapshot(s), indexed in {replay.load_seconds:.2f} s
capture time   {replay.capture_time:%Y-%m-%d %H:%M:%S} UTC (page clocks are frozen here)
misses         answered with {'the live web (NOT hermetic)' if replay.miss == 'live' else 'HTTP ' + replay.miss}{fuzzy}
engine         {replay.config.engine}{f', {replay.processes} processes' if replay.processes > 1 else ''}{shared}

How to connect:
  curl        curl --proxy {p} --cacert {ca} https://example.org/
  Chromium    chromium --proxy-server={p} --proxy-bypass-list='<-loopback>' \\
                --ignore-certificate-errors-spki-list={pin}
  Playwright  browser = p.chromium.launch(proxy={{"server": "{p}"}},
                  args=["--ignore-certificate-errors-spki-list={pin}"])
  browser-use BrowserProfile(proxy=ProxySettings(server="{p}", bypass="<-loopback>"), args=["--ignore-certificate-errors-spki-list={pin}"])
                (the bypass: browser-use, unlike Playwright, keeps Chromium's loopback bypass; and no proxy
                variables in its own process, or its CDP socket goes to the proxy)
  Python      HTTPS_PROXY={p} HTTP_PROXY={p} SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca}
Sealing: a Chromium you launch yourself must also get these flags, or WebRTC sends UDP and
  DNS lookups past the proxy (see docs/sealing.md):
  {seal}
Press Ctrl-C to stop; the replay stats are printed then."""


@click.command("serve")
@click.argument("snapshots", nargs=-1, required=True, type=LOCATION)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs --allow-remote.")
@click.option("--allow-corrupt", is_flag=True,
              help="Serve snapshots whose archive or index differs from their manifest (what can be read).")
@click.option("--allow-remote", is_flag=True,
              help="Allow a non-loopback --host: anyone who can reach it uses the proxy, unauthenticated.")
@click.option("--port", type=click.IntRange(0, 65535), default=8899, show_default=True, help="Port (0: any free port).")
@replay_options
@click.option("--stats", "stats_file", type=click.Path(path_type=Path), default=None,
              help="Write the replay stats (JSON) here on exit.")
@click.option("--duration", type=Finite(0), default=None, help="Stop after this many seconds.")
@click.option("--processes", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Serve from this many worker processes on the one port (fast engine; stats added up).")
@wire_options
def serve_cmd(snapshots: tuple[Path | str, ...], host: str, allow_corrupt: bool, allow_remote: bool, port: int, replay: ReplayConfig,
              stats_file: Path | None, duration: float | None, processes: int, wire: WireLimits) -> None:
    """Serve one or more SNAPSHOTS (folders, or URLs such as s3://bucket/prefix/TASK/ID) as a hermetic
    replay proxy: no request leaves the machine, every miss is answered and counted."""
    from ..guard import is_loopback_host
    from ..replay.session import Replay

    if not is_loopback_host(host):
        if not allow_remote:
            raise ReplayError(f"--host {host} would open an unauthenticated proxy to other machines; "
                              "add --allow-remote if that is what you want, or keep 127.0.0.1")
        click.secho(f"warning: serving on {host}: anyone who can reach this address can use the proxy "
                    "(no authentication); keep it on a trusted network", fg="yellow", err=True)
    if stats_file is not None:
        _check_writable(stats_file)
    server = Replay(list(snapshots), replay, host=host, port=port, check=not allow_corrupt, processes=processes,
                    wire=wire)
    stop = threading.Event()
    with server:
        click.echo(_connect_help(server))
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait(duration) if duration is not None else _wait_forever(stop)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
    s = server.stats()
    click.echo(f"\nreplay stats: {s.total} requests: exact {s.exact}, canonical {s.canonical}, fuzzy {s.fuzzy}, "
               f"miss {s.miss}, websocket {s.websocket}, blocked background {s.blocked}"
               + (f", LIVE {s.live} (not hermetic)" if s.live else ""))
    unlike = {"truncated capture": s.truncated, "other request fields (Vary)": s.variant,
              "past a changing recorded series": s.again}
    if any(unlike.values()):
        click.echo("answered, but not as recorded for this request: "
                   + ", ".join(f"{k} {v}" for k, v in unlike.items() if v))
    if s.refused:
        click.echo("proxy bounds (docs/limits.md): " + ", ".join(f"{k} {v}" for k, v in sorted(s.refused.items())))
    for url in s.missed_urls[:20]:
        click.echo(f"  missed: {url}")
    if len(s.missed_urls) > 20:
        click.echo(f"  ... and {len(s.missed_urls) - 20} more")
    if stats_file:
        try:
            server.write_stats(stats_file)
        except OSError as e:
            raise ReplayError(f"cannot write the stats file {stats_file} ({e.strerror or e})") from None
        click.echo(f"stats written to {stats_file}")


def _check_writable(path: Path) -> None:
    """Fail before serving, not after, when the stats file cannot be written."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".stats-probe-"):
            pass
    except OSError as e:
        raise ReplayError(f"cannot write the stats file {path} ({e.strerror or e}); "
                          "choose another --stats path") from None


def _wait_forever(stop: threading.Event) -> None:
    while not stop.wait(0.5):
        pass


COMMANDS = [serve_cmd]
