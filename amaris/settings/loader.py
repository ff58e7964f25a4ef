"""Reading the configuration: the YAML file, the environment, the command line, in that
order, validated once into :class:`~amaris.settings.schema.Settings`."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import EnvSettingsSource, SettingsError

from amaris.jsonfile import JSONDict
from amaris.settings.schema import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings


@dataclass(frozen=True)
class RawConfig:
    """A configuration mapping before validation, as YAML or the environment wrote it,
    changed in place by the layers over it."""

    # Its shape is whatever the file holds: validating it is the point of load_settings.
    data: JSONDict = field(default_factory=dict)

    def merge(self, top: RawConfig) -> None:
        """``top`` over this, in this: mappings merged key by key, other values replaced."""
        for key, value in top.data.items():
            below = self.data.get(key)
            if isinstance(below, dict) and isinstance(value, dict):
                RawConfig(below).merge(RawConfig(value))
            else:
                self.data[key] = value


class ConfigError(Exception):
    """The configuration is invalid; the message names every offending key (and the
    environment variable that set it)."""


def _environment_names() -> dict[tuple[str, ...], str]:
    """``AMARIS_<SECTION>__<KEY>`` variables that set a key: their dotted path -> name."""
    found: dict[tuple[str, ...], str] = {}
    for name in os.environ:
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = tuple(name[len(ENV_PREFIX) :].lower().split(ENV_NESTED_DELIMITER))
        if path[0] in Settings.model_fields:
            found[path] = name
    return found


def _format_errors(
    error: ValidationError, source: str, environment: dict[tuple[str, ...], str]
) -> str:
    lines = [f"invalid configuration in {source}:"]
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        key = ".".join(loc) or "(top level)"
        # The variables that set this key, a key inside it, or the section holding it.
        names = sorted(
            name
            for path, name in environment.items()
            if path[: len(loc)] == loc or loc[: len(path)] == path
        )
        if names:
            key = f"{key} ({', '.join(names)})"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
            near = difflib.get_close_matches(loc[-1], _keys_at(loc[:-1]), n=1)
            if near:
                message += f" (did you mean {'.'.join((*loc[:-1], near[0]))}?)"
        elif item["type"] == "model_type":
            message = "should be a mapping of its keys"  # not the class name pydantic gives
        lines.append(f"  {key}: {message}")
    return "\n".join(lines)


def _keys_at(loc: tuple[str, ...]) -> list[str]:
    """The keys a section of the settings takes (none known: an empty list)."""
    model: object = Settings
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(fields, dict) or part not in fields:
            return []
        model = fields[part].annotation
    fields = getattr(model, "model_fields", None)
    return list(fields) if isinstance(fields, dict) else []


def _environment_error(exc: SettingsError) -> ConfigError:
    """The error for an ``AMARIS_<SECTION>__<KEY>`` variable whose value is not the JSON
    its key needs (a list or a mapping), naming the variables of that section."""
    names = sorted(
        name for path, name in _environment_names().items() if f'"{path[0]}"' in str(exc)
    )
    return ConfigError(
        f"invalid configuration in the environment: {', '.join(names)}: "
        f"not valid JSON ({exc.__cause__ or exc})"
    )


def set_dotted(raw: RawConfig, dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a raw configuration mapping, creating the sections on the way."""
    node = raw.data
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Read, merge with the environment and validate the configuration.

    Layers, each over the one before: the built-in defaults, the YAML file, the
    ``AMARIS_<SECTION>__<KEY>`` environment variables, ``overrides``; then
    ``OPENAI_API_KEY`` / ``AMARIS_API_KEY`` fill in an API key no layer set.

    Args:
        path: YAML file; None = built-in defaults only.
        overrides: dotted keys (``server.port=9000``, the command line's) applied last.

    Raises:
        ConfigError: unreadable file or invalid keys/values, naming each key (and the
            environment variable that set it). It carries no secret: the validation
            error, whose input values could hold one, is not chained.
    """
    source = str(path) if path is not None else "(defaults)"
    raw = RawConfig()
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration {source}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration {source} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"configuration {source}: top level must be a mapping")
        raw = RawConfig(loaded or {})
    environment = _environment_names()
    if environment:
        source = f"{source} and the environment"
    try:
        # The keys the variables set, as a raw mapping (JSON for a list or a mapping,
        # ``null`` for null), read by pydantic-settings.
        raw.merge(RawConfig(EnvSettingsSource(Settings)()))
    except SettingsError as exc:
        raise _environment_error(exc) from None
    for dotted, value in overrides.items():
        if value is None:
            continue
        set_dotted(raw, dotted, value)
    # OPENAI_API_KEY and AMARIS_API_KEY where no layer sets the key.
    client = raw.data.setdefault("client", {}) or {}
    raw.data["client"] = client
    default = client.setdefault("default", {}) or {}
    client["default"] = default
    if not default.get("api_key") and os.environ.get("OPENAI_API_KEY"):
        default["api_key"] = os.environ["OPENAI_API_KEY"]
    server = raw.data.setdefault("server", {}) or {}
    raw.data["server"] = server
    if not server.get("api_key") and os.environ.get("AMARIS_API_KEY"):
        server["api_key"] = os.environ["AMARIS_API_KEY"]
    try:
        return Settings.model_validate(raw.data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source, environment)) from None
