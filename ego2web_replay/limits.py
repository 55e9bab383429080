"""Bounded reading: the limits every reader of untrusted input keeps, and one JSON reader that keeps them.

Archives, WACZ members, CDXJ lines, manifests, task files and trajectories may
come from anywhere. Whatever their content, reading one keeps memory under
about ``3 x MAX_RECORD_BYTES`` (a record's compressed bytes, its inflated bytes
and one parsed copy) plus ``2 x MAX_JSON_BYTES`` for a JSON document; with the
defaults that is under 512 MiB. A violation is an :class:`InputLimitError` whose
one-line message names the file and the limit (and the variable that raises it).

=================================  ==========  ==========================================
limit                              default     environment variable
=================================  ==========  ==========================================
one archive record, inflated       128 MiB     ``EGO2WEB_MAX_RECORD_BYTES``
inflation ratio of a record        1000 : 1    ``EGO2WEB_MAX_INFLATION`` (above 32 MiB only)
a JSON/YAML file or WACZ member    64 MiB      ``EGO2WEB_MAX_JSON_BYTES``
JSON nesting                       200 levels  (fixed)
digits of a JSON integer           100         (fixed)
=================================  ==========  ==========================================
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .errors import ArchiveError

__all__ = [
    "InputLimitError",
    "max_record_bytes",
    "max_inflation",
    "max_json_bytes",
    "MAX_JSON_DEPTH",
    "MAX_INT_DIGITS",
    "RATIO_FLOOR",
    "check_inflation",
    "depth_ok",
    "loads",
    "read_json",
    "read_text",
    "human",
]

MAX_JSON_DEPTH = 200
MAX_INT_DIGITS = 100
# The inflation ratio is only checked once a record is bigger than this. Memory is bounded by the
# record cap whatever the ratio; the ratio stops a bomb early. Below 32 MiB it would refuse real
# pages: a blank bitmap or a zero-filled data file of a few MiB compresses past 1000:1, and a
# recording holding one could not be finalized (nor replayed).
RATIO_FLOOR = 32 << 20


class InputLimitError(ArchiveError, ValueError):
    """An input is bigger, deeper or more inflated than the reading limits allow.

    Also a :class:`ValueError`, so code that skips malformed input skips it too."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        return default
    return value if value > 0 else default


def max_record_bytes() -> int:
    return _env_int("EGO2WEB_MAX_RECORD_BYTES", 128 << 20)


def max_inflation() -> int:
    return _env_int("EGO2WEB_MAX_INFLATION", 1000)


def max_json_bytes() -> int:
    return _env_int("EGO2WEB_MAX_JSON_BYTES", 64 << 20)


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def check_inflation(where: str, inflated: int, compressed: int) -> None:
    """Raise when a unit inflated past the record limit or the ratio limit (``where`` names file + offset)."""
    cap = max_record_bytes()
    if inflated > cap:
        raise InputLimitError(f"{where} inflates past the record limit of {human(cap)} "
                              "(EGO2WEB_MAX_RECORD_BYTES); the archive may be a decompression bomb")
    ratio = max_inflation()
    if inflated > RATIO_FLOOR and inflated > ratio * max(compressed, 1):
        raise InputLimitError(f"{where} inflates past the ratio limit of {ratio}:1 ({compressed} bytes to over {inflated}) "
                              "(EGO2WEB_MAX_INFLATION); the archive may be a decompression bomb")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Limit(f"an integer of {len(text)} digits (the limit is {MAX_INT_DIGITS})")
    return int(text)


class _Limit(ValueError):
    pass


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
def depth_ok(text: str | bytes) -> bool:
    """Whether brackets nest at most MAX_JSON_DEPTH deep (brackets inside strings do not count).

    Each pass deletes the innermost bracket pairs (one nesting level, at C speed), so the
    cost is the input size times its depth, capped at the limit.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        return True
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    for _ in range(MAX_JSON_DEPTH):
        inner = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if not inner or len(inner) == len(brackets):
            return True  # fully matched, or unbalanced (then json reports the syntax error)
        brackets = inner
    return False


def loads(text: str | bytes, what: str, error: type[Exception] = InputLimitError, *,
          not_json: str = "{what}: not valid JSON ({detail})") -> Any:
    """``json.loads`` within the nesting and integer limits.

    A document over a limit raises :class:`InputLimitError`; malformed JSON raises
    ``error`` (the caller's error type) with ``not_json`` as its message; both one line naming ``what``.
    """
    if len(text) > MAX_JSON_DEPTH and not depth_ok(text):  # shorter texts cannot nest past the limit
        raise InputLimitError(f"{what}: JSON nested more than {MAX_JSON_DEPTH} levels deep (the limit)")
    try:
        return json.loads(text, parse_int=_parse_int)
    except _Limit as e:
        raise InputLimitError(f"{what}: {e}") from None
    except RecursionError:
        raise InputLimitError(f"{what}: JSON nested more than {MAX_JSON_DEPTH} levels deep (the limit)") from None
    except json.JSONDecodeError as e:
        raise error(not_json.format(what=what, detail=f"{e.msg.removesuffix(' at')} at line {e.lineno} column {e.colno}")) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise error(not_json.format(what=what, detail=str(e).splitlines()[0])) from None


def read_text(path: Path, what: str | None = None, error: type[Exception] = InputLimitError,
              limit: int | None = None) -> str:
    """A UTF-8 text file of at most ``limit`` (default :func:`max_json_bytes`) bytes."""
    cap = limit or max_json_bytes()
    name = what or str(path)
    try:
        size = path.stat().st_size
        if size > cap:
            raise InputLimitError(f"{name}: {size} bytes is over the limit of {human(cap)} (EGO2WEB_MAX_JSON_BYTES)")
        with path.open("rb") as f:
            data = f.read(cap + 1)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise error(f"{name}: cannot read it ({e.strerror or e})") from None
    if len(data) > cap:
        raise InputLimitError(f"{name}: over the limit of {human(cap)} (EGO2WEB_MAX_JSON_BYTES)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{name}: not UTF-8 text (byte {e.start})") from None


def read_json(path: Path, what: str | None = None, error: type[Exception] = InputLimitError, *,
              not_json: str = "{what}: not valid JSON ({detail})") -> Any:
    """A JSON file read within every limit (size, nesting, integer digits)."""
    return loads(read_text(path, what, error), what or str(path), error, not_json=not_json)
