"""A JSON file named on the command line (``--data``, ``--manifest``), read with an error
that names the option and the file instead of a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeAlias

JSONDict: TypeAlias = dict[str, Any]
"""A JSON object whose shape is not amaris's to know, declared once here: a trainer's
metadata, a judge's or an agent's raw reply before its schema checks it, the provider's
wire format, a file of any version read leniently. The aliases built on it (``DataBlock``,
``JSONObject``, ``ConfigJSON``; ``RawConfig`` holds one) say which JSON each is; a shape
amaris knows gets a model or a TypedDict instead."""


class JsonFileError(ValueError):
    """The file cannot be read as JSON; the message starts ``<option> <path>:``."""


def read_json(path: Path, option: str) -> Any:
    """The JSON value in the file at ``path``, which the user gave as ``option``.

    Raises:
        JsonFileError: the file is unreadable, not UTF-8, or not JSON.
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise JsonFileError(f"{option} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise JsonFileError(f"{option} {path}: not UTF-8 text ({exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"{option} {path}: not JSON ({exc})") from exc
