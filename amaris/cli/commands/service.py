"""``amaris serve``, ``check-judge``, ``repair``, ``repair-worker`` and ``ui``: the reward
service and the Prefect server it runs its steps on.

Prefect reads its settings (API URL, auth string, home) from the environment once, at
import: ``serve`` and ``repair`` set them in an environment step
(:mod:`amaris.cli.environment`) before their handlers, which import Prefect, are imported;
``repair-worker`` runs in the process ``serve`` spawns with them set.
"""

from __future__ import annotations

from amaris.cli.common import CONFIG, SubParsers, command


def register(sub: SubParsers) -> None:
    """Add ``serve``, ``check-judge``, ``repair``, ``repair-worker`` and ``ui``."""
    parser = command(
        sub,
        "serve",
        "amaris.cli.serve:serve",
        environment="amaris.cli.environment:launched_service",
        parents=[CONFIG],
        help="run the reward service",
    )
    parser.add_argument("--host", default=None, help="override server.host")
    parser.add_argument("--port", type=int, default=None, help="override server.port")
    parser.add_argument(
        "--prefect-port", type=int, default=None, help="override prefect.port (the Prefect UI's)"
    )

    command(
        sub,
        "check-judge",
        "amaris.cli.service:check_judge",
        parents=[CONFIG],
        help="probe every agent's LLM endpoint: reachable, model listed, "
        "structured-output mode, one sample scoring, context window",
    )

    parser = command(
        sub,
        "repair",
        "amaris.cli.repair:repair",
        environment="amaris.cli.environment:recorded_prefect",
        parents=[CONFIG],
        help="re-run failed steps once (the scheduled repair)",
    )
    parser.add_argument("--url", default=None, help="amaris API (default: from server:)")

    # Started by `amaris serve`, which sets AMARIS_REPAIR_URL (and AMARIS_API_KEY).
    parser = command(sub, "repair-worker", "amaris.cli.repair:repair_worker", help=None)
    parser.add_argument("--interval", type=int, required=True)

    command(
        sub,
        "ui",
        "amaris.cli.service:ui",
        parents=[CONFIG],
        help="print the Prefect UI address of the running service",
    )
