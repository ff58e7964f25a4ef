"""``amaris offline-llm``: the offline judge served as an OpenAI-compatible API
(:mod:`amaris.cli.offline_llm`)."""

from __future__ import annotations

from amaris.cli.common import SubParsers, command


def register(sub: SubParsers) -> None:
    """Add ``offline-llm`` (it reads no configuration: no ``--config``)."""
    parser = command(
        sub,
        "offline-llm",
        "amaris.cli.offline_llm:offline_llm",
        help="serve the offline judge as an OpenAI-compatible API",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="answer each request after this many ms (its rules' own work included)",
    )
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--timeout-rate", type=float, default=0.0)
    parser.add_argument("--malformed-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--requests-per-minute",
        type=int,
        default=None,
        help="enforce this many requests a minute: 429 with retry-after past it, and "
        "x-ratelimit-* headers on every answer (default: no limit)",
    )
    parser.add_argument(
        "--tokens-per-minute",
        type=int,
        default=None,
        help="enforce this many tokens (prompt and completion, as reported) a minute",
    )
    parser.add_argument(
        "--rate-burst-seconds",
        type=float,
        default=60.0,
        help="seconds of each limit that may be spent at once (default 60: a minute's)",
    )
