"""The ``amaris`` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from amaris.settings import ConfigError, Settings, load_settings


def _settings(args: argparse.Namespace) -> Settings:
    path = args.config
    if path is None and Path("config.yaml").is_file():
        path = Path("config.yaml")
    overrides: dict[str, Any] = {}
    if getattr(args, "host", None):
        overrides["server.host"] = args.host
    if getattr(args, "port", None):
        overrides["server.port"] = args.port
    return load_settings(path, **overrides)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from amaris.logs import configure_logging
    from amaris.service import build_services
    from api.app import create_app

    settings = _settings(args)
    configure_logging(settings.logging.level)
    app = create_app(settings, services=build_services(settings, warm_prefect=True))
    uvicorn.run(app, host=settings.server.host, port=settings.server.port,
                log_level=settings.logging.level.lower(), timeout_graceful_shutdown=30)
    return 0


def _offline_llm(args: argparse.Namespace) -> int:
    import uvicorn

    from amaris.offline.server import FaultProfile, create_llm_app, offline_responder

    for name in ("error_rate", "timeout_rate", "malformed_rate"):
        value = getattr(args, name)
        if not 0.0 <= value <= 1.0:
            print(f"--{name.replace('_', '-')} must be within [0, 1]", file=sys.stderr)
            return 2
    profile = FaultProfile(args.latency_ms, args.error_rate, args.timeout_rate,
                           args.malformed_rate, args.seed)
    print(f"amaris offline LLM (rule-based, NOT an LLM) on http://{args.host}:{args.port}/v1 "
          f"latency={args.latency_ms}ms errors={args.error_rate} timeouts={args.timeout_rate} "
          f"malformed={args.malformed_rate}", file=sys.stderr)
    uvicorn.run(create_llm_app(offline_responder(profile)), host=args.host, port=args.port,
                log_level="warning", access_log=False)
    return 0


def _rubrics(args: argparse.Namespace) -> int:
    from amaris.qdrant import StoreLockedError, open_qdrant
    from amaris.rubric_store import RubricStore

    settings = _settings(args)
    try:
        client = open_qdrant(settings.memory)
    except StoreLockedError as exc:
        if args.action == "init":
            print(f"{exc}; stop the server before `amaris rubrics init`.", file=sys.stderr)
            return 1
        return _rubrics_via_api(settings, args.url)
    try:
        store = RubricStore(client, settings.memory.collection,
                            settings.memory.rubrics_export_path)
        if args.action == "init":
            version = store.reset_from_config(settings)
            print(f"rubric version {version.version} created from the configuration "
                  f"({len(version.anchors)} anchors, {len(version.adaptive)} adaptive)")
            return 0
        version = store.ensure_initialized(settings)
        _print_rubric(version.public().model_dump(mode="json"))
        return 0
    finally:
        client.close()


def _rubrics_via_api(settings: Settings, url: str | None) -> int:
    import httpx

    host = "127.0.0.1" if settings.server.host in {"0.0.0.0", "::"} else settings.server.host
    url = (url or f"http://{host}:{settings.server.port}").rstrip("/")
    headers = {"Authorization": f"Bearer {settings.server.api_key}"} if settings.server.api_key \
        else {}
    try:
        response = httpx.get(f"{url}/rubrics", headers=headers, timeout=10)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        print(f"the store is locked by another process and its API is unreachable: {exc}",
              file=sys.stderr)
        return 1
    _print_rubric(response.json())
    return 0


def _print_rubric(rubric: dict[str, Any]) -> None:
    print(f"rubric version {rubric['version']} (origin {rubric['origin']}, parent "
          f"{rubric['parent']}, step {rubric['step']}, created {rubric['created_at']})")
    for kind in ("anchors", "adaptive"):
        print(f"{kind}:")
        if not rubric[kind]:
            print("  (none)")
        for c in rubric[kind]:
            print(f"  {c['id']:>4}  weight {c['weight']:+.2f}  {c['text']}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="amaris", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the reward service")
    serve.add_argument("--config", type=Path, default=None,
                       help="config file (default: ./config.yaml if present, else built-ins)")
    serve.add_argument("--host", default=None, help="override server.host")
    serve.add_argument("--port", type=int, default=None, help="override server.port")
    serve.set_defaults(func=_serve)

    rubrics = sub.add_parser("rubrics", help="inspect or reset the rubric store")
    rubrics.add_argument("action", choices=["show", "init"],
                         help="show: the version in force; init: new version from config")
    rubrics.add_argument("--config", type=Path, default=None)
    rubrics.add_argument("--url", default=None,
                         help="server to ask when it holds the store (default: from server:)")
    rubrics.set_defaults(func=_rubrics)

    llm = sub.add_parser("offline-llm", help="serve the offline judge as an OpenAI-compatible API")
    llm.add_argument("--host", default="127.0.0.1")
    llm.add_argument("--port", type=int, default=8011)
    llm.add_argument("--latency-ms", type=float, default=0.0)
    llm.add_argument("--error-rate", type=float, default=0.0)
    llm.add_argument("--timeout-rate", type=float, default=0.0)
    llm.add_argument("--malformed-rate", type=float, default=0.0)
    llm.add_argument("--seed", type=int, default=0)
    llm.set_defaults(func=_offline_llm)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    from amaris.prompts import PromptError
    from amaris.qdrant import StoreLockedError
    from amaris.rubric_store import RubricStoreError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (ConfigError, PromptError, StoreLockedError, RubricStoreError) as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
