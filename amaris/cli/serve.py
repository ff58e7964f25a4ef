"""``amaris serve``'s handler: the reward service, in the environment
:func:`amaris.cli.environment.launched_service` set (this module imports Prefect)."""

from __future__ import annotations

import argparse

from amaris.app.serve import serve as serve_app


def serve(args: argparse.Namespace) -> int:
    """Run the reward service until it is stopped."""
    return serve_app(args.settings, args.launch)
