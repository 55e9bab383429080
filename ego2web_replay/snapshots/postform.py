"""The pywb / cdxj-indexer POST-body convention: a request body as a query string.

This is the ONE implementation of the convention in the project: the CDXJ
index (:mod:`.cdxj`) writes archived request bodies in this form, and replay
matching (:mod:`ego2web_replay.replay.canonical`) puts incoming bodies in the
same form before comparing them, so an archived and a live POST are compared
field by field on equal terms.

* ``application/x-www-form-urlencoded``: the body, percent-unquoted;
* ``application/json`` (and ``text/plain`` holding JSON): its leaf
  ``key=value`` pairs, a repeated key numbered ``key.2_``, values as Python's
  ``str`` writes them (``True``, ``None``), form-encoded; JSON lines are read
  line by line;
* ``multipart/*``: its named fields (file parts as their bytes), form-encoded;
* anything else: ``__wb_post_data=<base64 of the body>``.

The result is cut at :data:`MAX_QUERY_LENGTH` characters. :func:`post_query`
prefixes ``__wb_method=<method>``; appended to the URL's query it gives the
key pywb and cdxj-indexer write for a POST capture.
"""

from __future__ import annotations

import base64
import hashlib
import json
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import unquote_plus, urlencode

from ..limits import depth_ok

__all__ = ["MAX_QUERY_LENGTH", "post_query", "request_body_query"]

MAX_QUERY_LENGTH = 4096


def _flatten_json(body: bytes) -> str:
    pairs: list[tuple[str, str]] = []
    seen: dict[str, int] = {}

    def add(name: str, value: object) -> None:
        key = name
        if any(k == name for k, _ in pairs):
            seen[name] = seen.get(name, 1) + 1
            key = f"{name}.{seen[name]}_"
        pairs.append((key, str(value)))

    def walk(node: object, name: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, name)
        elif name:
            add(name, node)

    if not depth_ok(body):  # walk() recurses once per level
        raise ValueError("JSON body nested too deep to index")
    try:
        walk(json.loads(body))
    except json.JSONDecodeError:
        if b"\n" not in body:
            raise
        for line in body.split(b"\n"):
            if line.strip():
                walk(json.loads(line))
    return urlencode(pairs)


def _multipart(content_type: str, body: bytes) -> str:
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise ValueError("not multipart")
    values: list[tuple[str, str | bytes]] = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name is None:
            continue
        raw = part.get_payload(decode=True)
        data = raw if isinstance(raw, bytes) else b""
        if part.get_filename():
            values.append((str(name), data))
        else:
            values.append((str(name), data.decode("utf-8", "replace")))
    return urlencode(values, True)


def request_body_query(content_type: str | None, body: bytes) -> str:
    """Turn a request body into a query string (the pywb / cdxj-indexer convention).

    Form bodies are unquoted, JSON is flattened to its leaf ``key=value`` pairs,
    multipart bodies become their fields (no boundary), anything else becomes
    ``__wb_post_data=<base64>``. The result is cut at 4096 characters.
    """
    mime = (content_type or "").lower()
    binary = "__wb_post_data=" + base64.b64encode(body).decode("ascii")
    query = ""
    if mime.startswith("application/x-www-form-urlencoded"):
        try:
            query = unquote_plus(body.decode("utf-8"))
        except UnicodeDecodeError:
            query = binary
    elif mime.startswith("multipart/"):
        try:
            query = _multipart(content_type or "", body)
        except (ValueError, UnicodeError):
            query = binary
    elif mime.startswith("application/json"):
        try:
            query = _flatten_json(body)
        except (ValueError, UnicodeDecodeError):
            query = ""
    elif mime.startswith("text/plain"):
        try:
            query = _flatten_json(body)
        except (ValueError, UnicodeDecodeError):
            query = binary
    elif body:
        query = binary
    if len(query) > MAX_QUERY_LENGTH:
        # a cut form would make bodies that differ past the cut (a GraphQL query's variables after a long
        # `query` text) one key: keep the start, and name the whole form by its digest
        tail = "&__wb_body_sha256=" + hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()
        query = query[:MAX_QUERY_LENGTH - len(tail)] + tail
    return query


def post_query(method: str, content_type: str | None, body: bytes) -> str:
    """The ``__wb_method=<method>[&<body query>]`` string appended to a non-GET request's URL."""
    query = "__wb_method=" + method.lower()
    if method.upper() in ("POST", "PUT"):
        body_query = request_body_query(content_type, body)
        if body_query:
            query += "&" + body_query
    return query
