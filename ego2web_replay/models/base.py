"""What every file model shares: a format version, and one way to read and write it.

A model stored as a JSON file derives from :class:`FileModel`. Its ``version``
says which form of the model wrote the file; a reader refuses a file from a
newer version with one line that says to upgrade, instead of misreading it.
:func:`read_model` and :func:`save_model` are the only places files become
models and models files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from ..atomic import atomic_write_text
from ..errors import Ego2WebError
from ..limits import loads, read_text

__all__ = ["FileModel", "read_model", "parse_model", "save_model", "describe_validation_error", "check_id",
           "check_relative_path", "MAX_ID_LENGTH"]


class FileModel(BaseModel):
    """A model kept as a JSON file; ``FORMAT_VERSION`` is the newest form this code reads.

    A subclass that changes its form raises both ``FORMAT_VERSION`` and the default of
    ``version`` (a test checks that they agree).
    """

    FORMAT_VERSION: ClassVar[int] = 1

    version: int = Field(default=1, ge=1, description="Format version of the file (see FORMAT_VERSION).")

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        if isinstance(data, dict):
            newer = newer_version(cls, data)
            if newer is not None:
                raise ValueError(newer)
        return data


def newer_version(model: type[FileModel], data: dict[str, Any]) -> str | None:
    """Why ``data`` cannot be read as ``model`` because it is of a newer form; None when it can."""
    v = data.get("version")
    if isinstance(v, int) and not isinstance(v, bool) and v > model.FORMAT_VERSION:
        return (f"format version {v} is newer than this ego2web-replay reads "
                f"({model.FORMAT_VERSION}); upgrade ego2web-replay")
    return None


def describe_validation_error(err: ValidationError) -> str:
    """The first problem of a validation error, on one line: ``field 'a.b': message``."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    return f"field '{loc}': {msg}" if loc else msg


def read_model[M: BaseModel](path: str | os.PathLike[str], model: type[M], what: str,
                             error: type[Ego2WebError] = Ego2WebError) -> M:
    """Read the JSON file ``path`` as ``model``.

    A missing file raises :class:`FileNotFoundError` (callers say what to do);
    anything else wrong (bad JSON, a field that does not validate, a newer
    format version) raises ``error`` with one line naming the file and the problem.
    """
    p = Path(path)
    text = read_text(p, f"{p}: the {what}", error)  # within the size limit; FileNotFoundError as is
    return parse_model(text, p, model, what, error)


def parse_model[M: BaseModel](text: str | bytes, where: str | os.PathLike[str], model: type[M], what: str,
                              error: type[Ego2WebError] = Ego2WebError) -> M:
    """The JSON ``text`` (the content of ``where``) as ``model``; errors as :func:`read_model`."""
    # nesting and number limits (InputLimitError); malformed JSON is ``error``
    data = loads(text, f"{where}: the {what}", error, not_json=f"{where}: not a valid {what} (not JSON: {{detail}})")
    if isinstance(data, dict) and issubclass(model, FileModel):
        newer = newer_version(model, data)
        if newer is not None:
            raise error(f"{where}: {what} {newer}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(f"{where}: not a valid {what} ({describe_validation_error(e)})") from None


def save_model(path: str | os.PathLike[str], model: BaseModel) -> None:
    """Write a model as indented JSON, atomically."""
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


MAX_ID_LENGTH = 200  # a path component: 255 bytes at most, with room for ".partial" and the like
_ID = re.compile(r"[A-Za-z0-9._-]+")


def check_id(kind: str, value: str) -> str:
    """A task, run or snapshot id that is safe as one path component; ValueError saying why not."""
    if not _ID.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"invalid {kind} {value!r}: use only letters, digits, '.', '_' and '-'")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(f"invalid {kind}: {len(value)} characters, over the limit of {MAX_ID_LENGTH}")
    return value


def check_relative_path(value: str) -> str:
    """A path that must stay inside its folder: relative, without '..'; ValueError otherwise."""
    posix = value.replace("\\", "/")
    if not posix or posix.startswith("/") or re.match(r"^[A-Za-z]:", posix) or ".." in posix.split("/"):
        raise ValueError(f"the path {value!r} leaves its folder (absolute or with '..')")
    return value
