"""The settings a command reads: those of ``--config`` (:func:`amaris.cli.common.config_path`),
and the server it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from amaris.app.running import recorded_service
from amaris.cli.common import config_path
from amaris.settings import Settings, load_settings


def load(args: argparse.Namespace, **overrides: object) -> Settings:
    """The settings of ``--config`` (see :func:`~amaris.cli.common.config_path`), the
    environment and ``overrides`` (dotted keys; None = not given).

    Raises:
        amaris.settings.ConfigError: the configuration is invalid.
    """
    return load_settings(config_path(args), **overrides)


def server_url(settings: Settings, url: str | None = None) -> str:
    """``url`` (``--url``), else the address the ``amaris serve`` running on the data folder
    recorded, else the configured server (a wildcard bind address is asked on loopback)."""
    if url:
        return url.rstrip("/")
    return recorded_service(Path(settings.memory.path)) or settings.server.local_url
