"""The run manifest: what a run was made of, so that it can be told apart and replayed.

Every ``amaris serve`` start, every ``amaris simulate`` / ``amaris replay`` run and every
``amaris bootstrap`` that publishes a version writes one,
``<data folder>/manifest-<start>-<kind>.json``: the configuration with its secrets removed
and its hash, the versions of amaris and its key dependencies, each agent's model,
endpoint kind (``offline`` / ``local`` / ``hosted``) and prompt fingerprint, the seed, the
git commit of the source tree when there is one, and the start time. Building one reads
package metadata and asks git once.

Secrets never enter it: every ``SecretStr`` setting (API keys) becomes null and is listed
in ``secrets_removed``; a mapping entry whose name says key, token, secret, password or
authorization (in ``extra_body``...) is removed the same way; URLs lose their user,
password and query (:func:`amaris.redact.redact_url`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Required, TypedDict

from pydantic import BaseModel, RootModel, SecretStr

from amaris.agents.prompts import prompt_fingerprint
from amaris.atomic import replace_file
from amaris.jsonfile import JSONDict, JsonFileError, read_json
from amaris.redact import redact_url
from amaris.settings import AgentName, Settings, is_local_url, template_agent

MANIFEST_VERSION = 1
PACKAGES = (
    "amaris",
    "prefect",
    "qdrant-client",
    "openai",
    "pydantic",
    "fastapi",
    "torch",
    "sentence-transformers",
)
"""The distributions whose versions a manifest records (null: not installed)."""
GIT_TIMEOUT_S = 5.0
_SECRET_NAME = re.compile(r"key|token|secret|password|authorization|credential", re.IGNORECASE)


class ManifestError(ValueError):
    """A manifest file cannot be read; the message names the file and the field."""


ConfigJSON = JSONDict
"""The configuration as plain JSON (:func:`redacted_config`): every settings section and
the open ``extra`` ones, so JSON of open shape."""


class AgentRecord(TypedDict):
    """What a manifest records of one agent (:func:`agents`)."""

    model: str
    endpoint: str
    base_url: str | None
    prompt_fingerprint: str | None
    prompt_sha256: str | None


class Manifest(TypedDict, total=False):
    """A run manifest as written (:func:`build_manifest`: every field) and read back
    (:func:`read_manifest`, which checks ``config`` only: a file of another manifest version
    may lack the others)."""

    manifest_version: int
    kind: str
    run_id: str
    """``<kind>-<start, %Y%m%dT%H%M%S%fZ>-<pid>``."""
    started_at: str
    seed: int | None
    config_hash: str
    config: Required[ConfigJSON]
    secrets_removed: list[str]
    versions: dict[str, str | None]
    git_commit: str | None
    agents: dict[str, AgentRecord]
    extra: JSONDict  # what the run adds (its arguments, its source): JSON of its kind


ManifestJSON = Manifest
"""The name importers knew :class:`Manifest` by."""


def _secret(key: object, item: object, where: str, removed: list[str]) -> bool:
    """Whether ``key: item`` is a secret (a string under a secret's name), then recorded
    in ``removed`` as ``where``."""
    if _SECRET_NAME.search(str(key)) and isinstance(item, str):
        removed.append(where)
        return True
    return False


def _clean(value: Any, path: str, removed: list[str]) -> Any:
    """``value`` as plain JSON with its secrets removed (paths recorded in ``removed``)."""
    if isinstance(value, SecretStr):
        removed.append(path)
        return None
    if isinstance(value, RootModel):  # the provider's JSON (ProviderJSON): its own JSON
        return _clean(value.root, path, removed)
    if isinstance(value, BaseModel):
        return {
            name: _clean(getattr(value, name), f"{path}.{name}".lstrip("."), removed)
            for name in type(value).model_fields
        }
    if isinstance(value, dict):
        # Per entry in order: the secret's check (recording it), then the value's cleaning.
        return {
            str(key): _clean(item, f"{path}.{key}".lstrip("."), removed)
            for key, item in value.items()
            if not _secret(key, item, f"{path}.{key}".lstrip("."), removed)
        }
    if isinstance(value, list | tuple):
        return [_clean(item, f"{path}[{i}]", removed) for i, item in enumerate(value)]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str) and path.endswith("url"):
        return redact_url(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def redacted_config(settings: Settings) -> tuple[ConfigJSON, list[str]]:
    """The whole configuration as JSON without secrets, and the keys that were removed."""
    removed: list[str] = []
    return _clean(settings, "", removed), removed


def config_hash(config: ConfigJSON) -> str:
    """``sha256:<hex>`` of the configuration's canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (null: not installed)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def git_commit() -> str | None:
    """The commit of the git checkout amaris runs from (``+dirty`` with local changes to
    tracked files), or null (an installed wheel, no git)."""
    source = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "describe", "--always", "--dirty=+dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def endpoint_kind(settings: Settings, agent: AgentName) -> str:
    """``offline`` (the rule-based agents), ``local`` (this machine) or ``hosted``."""
    if settings.client.offline_agents([agent]):
        return "offline"
    return "local" if is_local_url(settings.client.for_agent(agent).base_url) else "hosted"


def agents(settings: Settings, prompts: dict[str, str]) -> dict[str, AgentRecord]:
    """Per agent: model, endpoint kind and URL (no credentials), prompt fingerprint (the
    pipeline's cache-key fingerprint: template, model, temperature) and template hash."""
    out: dict[str, AgentRecord] = {}
    for agent in settings.served_agents:
        options = settings.agents.for_agent(agent)
        base_url = settings.client.for_agent(agent).base_url
        template = prompts.get(template_agent(agent))
        out[agent] = {
            "model": options.model,
            "endpoint": endpoint_kind(settings, agent),
            "base_url": redact_url(base_url) if base_url else None,
            "prompt_fingerprint": (
                prompt_fingerprint(template, options.model, options.temperature)
                if template is not None
                else None
            ),
            "prompt_sha256": (
                hashlib.sha256(template.encode()).hexdigest() if template is not None else None
            ),
        }
    return out


def build_manifest(
    settings: Settings,
    prompts: dict[str, str],
    kind: str,
    *,
    seed: int | None = None,
    extra: BaseModel | None = None,
) -> Manifest:
    """The manifest of a run of ``kind`` (``serve``, ``simulate``, ``replay``...) that starts
    now; ``extra``: what the run adds (its arguments, its source manifest), its fields set
    (a record's model leaves out a field it was not given)."""
    config, removed = redacted_config(settings)
    started = datetime.now(UTC)
    return {
        "manifest_version": MANIFEST_VERSION,
        "kind": kind,
        "run_id": f"{kind}-{started.strftime('%Y%m%dT%H%M%S%fZ')}-{os.getpid()}",
        "started_at": started.isoformat(),
        "seed": seed,
        "config_hash": config_hash(config),
        "config": config,
        "secrets_removed": removed,
        "versions": versions(),
        "git_commit": git_commit(),
        "agents": agents(settings, prompts),
        "extra": {} if extra is None else extra.model_dump(exclude_unset=True),
    }


def write_manifest(manifest: Manifest, folder: Path, name: str | None = None) -> Path:
    """Write ``manifest`` into ``folder`` (atomically) as ``name`` or
    ``manifest-<start>-<kind>.json``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    # run_id is <kind>-<stamp>-<pid>, and a kind may hold dashes (simulate-ablation).
    stamp = manifest["run_id"].rsplit("-", 2)[1]
    path = folder / (name or f"manifest-{stamp}-{manifest['kind']}.json")
    replace_file(path, [json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"])
    return path


def manifests(folder: Path) -> list[Path]:
    """The manifests in a data folder, oldest first."""
    return sorted(folder.glob("manifest-*.json"))


def read_manifest(path: Path) -> Manifest:
    """A manifest file, checked for the fields a replay takes from it.

    Raises:
        ManifestError: unreadable, not JSON, or without ``config``.
    """
    try:
        loaded: Manifest = read_json(path, "--manifest")  # checked below
    except JsonFileError as exc:
        raise ManifestError(str(exc)) from exc
    if not isinstance(loaded, dict) or not isinstance(loaded.get("config"), dict):
        raise ManifestError(f"--manifest {path}: config: missing (not an amaris run manifest)")
    return loaded


def markdown(manifest: Manifest) -> str:
    """The manifest as a short Markdown page (the Prefect artifact, ``amaris manifest``)."""
    lines = [
        f"# Run manifest: {manifest['run_id']}",
        "",
        f"- started: {manifest['started_at']}",
        f"- config hash: `{manifest['config_hash']}`",
        f"- seed: {manifest.get('seed')}",
        f"- git commit: {manifest.get('git_commit') or 'none'}",
        f"- secrets removed: {', '.join(manifest.get('secrets_removed') or []) or 'none set'}",
        "- versions: "
        + ", ".join(f"{k} {v or '-'}" for k, v in (manifest.get("versions") or {}).items()),
        "",
        "| agent | model | endpoint | prompt fingerprint |",
        "|---|---|---|---|",
    ]
    for agent, info in (manifest.get("agents") or {}).items():
        lines.append(
            f"| {agent} | {info['model']} | {info['endpoint']} | {info['prompt_fingerprint']} |"
        )
    return "\n".join(lines) + "\n"
