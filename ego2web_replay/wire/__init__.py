"""The proxy wire: what both fast proxies (replay and recording) speak to clients.

An asyncio connection that answers CONNECT, turns a tunnel to TLS with a leaf
minted from the project CA (:mod:`.certs`), and reads HTTP/1.1 (:mod:`.h1`) or
HTTP/2 (:mod:`.h2conn`) requests, handing each to its server's ``reply``
(:mod:`.conn`); a :class:`~.reply.Reply` goes back on the wire as it says. The
replay front end (``replay/front.py``) answers from a snapshot; the recording
front end (``recorder/front.py``) from the live upstream.
"""

from .reply import Reply

__all__ = ["Reply"]
