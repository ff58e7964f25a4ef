"""The settings a command reads: those of ``--config`` (:func:`amaris.cli.common.config_path`),
and the server it names."""

from __future__ import annotations

import argparse

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
    """``url``, else the configured server (a wildcard bind address is asked on loopback)."""
    return url.rstrip("/") if url else settings.server.local_url
