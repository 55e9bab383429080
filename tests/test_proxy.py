from __future__ import annotations

import socket
import stat
import urllib.request

import pytest

from ego2web_replay.errors import ProxyError
from ego2web_replay.proxy import ProxyServer, spki_pin


class _Answer:
    def request(self, flow):
        from mitmproxy import http

        flow.response = http.Response.make(200, f"answered {flow.request.pretty_url}".encode())


def _get(proxy_url: str, url: str) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url}))
    return opener.open(url, timeout=10).read()


def test_ca_files_private_and_pin(ca):
    key = ca.confdir / "mitmproxy-ca.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(ca.confdir.stat().st_mode) == 0o700
    assert ca.spki == spki_pin(ca.cert_path.read_bytes())
    assert b"PRIVATE KEY" not in ca.cert_path.read_bytes()


def test_start_stop_restart_same_port(ca):
    port = 0
    for _ in range(3):
        with ProxyServer([_Answer()], ca=ca, port=port) as proxy:
            assert proxy.host == "127.0.0.1"
            assert _get(proxy.url, "http://example.invalid/a") == b"answered http://example.invalid/a"
            port = proxy.port
    # after stop the port is free again: a plain listener can bind it
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.close()


def test_port_in_use_is_a_clear_error(ca):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ProxyError, match="in use"):
            ProxyServer([], ca=ca, port=s.getsockname()[1]).start()


def test_one_proxy_per_process(ca):
    with ProxyServer([], ca=ca):
        with pytest.raises(ProxyError, match="already running"):
            ProxyServer([], ca=ca).start()
    with ProxyServer([], ca=ca):  # and a new one starts after the first stopped
        pass


def test_bad_option_is_a_clear_error(ca):
    with pytest.raises(ProxyError, match="bad proxy option"):
        ProxyServer([], ca=ca, options={"no_such_option": 1}).start()


def test_the_project_ca_is_loaded_once_while_its_files_stay_the_same(tmp_path):
    """Each episode asks for the CA: the second ask reuses the first load; a CA made anew is loaded anew."""
    import shutil

    from ego2web_replay.proxy import project_ca

    first = project_ca(tmp_path / "ca")
    assert project_ca(tmp_path / "ca") is first
    shutil.rmtree(tmp_path / "ca")
    second = project_ca(tmp_path / "ca")
    assert second is not first and second.spki != first.spki
    assert second.spki == project_ca(tmp_path / "ca").spki
