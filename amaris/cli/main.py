"""The ``amaris`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from amaris.agents.prompts import PromptError
from amaris.app.check_judge import check_judges, render
from amaris.app.launch import launched
from amaris.app.prefect_server import (
    AUTH_FILE,
    PrefectServerError,
    read_auth_string,
    recorded_server,
)
from amaris.cli import bootstrap as cli_bootstrap
from amaris.cli import inspect as cli_inspect
from amaris.cli import manifest as cli_manifest
from amaris.cli import simulate as commands
from amaris.client import AmarisError
from amaris.memory.embedder import EmbedderConfigError
from amaris.memory.inspection import MAX_RECENT, MAX_SEARCH_LIMIT
from amaris.memory.models import DOC_TYPES
from amaris.memory.qdrant import CollectionMismatchError, StoreLockedError, open_qdrant
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.store import MemoryStoreError
from amaris.private import UnsafeFolderError
from amaris.redact import redact_url
from amaris.rubric.integrity import check_rubric_store
from amaris.rubric.store import RubricStore, RubricStoreError
from amaris.settings import ConfigError, Settings, load_settings, secret_value
from amaris.sim.driver import DriverError
from amaris.sim.judge_server import FaultProfile, create_llm_app, offline_responder
from amaris.sim.server import ServerError


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
    settings = _settings(args)
    path = args.config if args.config is not None else Path("config.yaml")
    if path.is_file():
        # Step runs that Prefect's runner executes in processes of their own
        # (``pipeline.executor: deployment``) build their pipeline context from it.
        os.environ.setdefault("AMARIS_CONFIG", str(path.resolve()))
    with launched(settings) as launch:
        # Imported once launched() has set Prefect's environment: Prefect reads it once,
        # at import (amaris.app.launch says which settings).
        from amaris.app.serve import serve

        return serve(settings, launch)


def _prefect_home(settings: Settings) -> Path:
    return Path(os.environ.get("PREFECT_HOME") or Path(settings.memory.path).resolve() / "prefect")


def _use_recorded_prefect(settings: Settings) -> bool:
    """Point this process at the Prefect server a running ``amaris serve`` started, with
    its auth string."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    home = _prefect_home(settings)
    recorded = recorded_server(home)
    if recorded is None:
        return False
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["PREFECT_API_URL"] = recorded["api_url"]
    auth = read_auth_string(home)
    if auth is not None:
        os.environ["PREFECT_API_AUTH_STRING"] = auth
    return True


def _repair(args: argparse.Namespace) -> int:

    settings = _settings(args)
    if not _use_recorded_prefect(settings):
        print(
            "amaris: no Prefect server for this data folder; is `amaris serve` running?",
            file=sys.stderr,
        )
        return 1
    # The operator's own run: the flow repairs the server this command names.
    os.environ["AMARIS_REPAIR_URL"] = cli_inspect.server_url(settings, args.url)
    key = secret_value(settings.server.api_key)
    if key:
        os.environ.setdefault("AMARIS_API_KEY", key)
    from flows.repair import repair_steps

    outcome = asyncio.run(repair_steps())
    print(json.dumps({str(k): v for k, v in outcome.items()}) if outcome else "no failed steps")
    return 0 if all(v == "updated" for v in outcome.values()) else 1


def _repair_worker(args: argparse.Namespace) -> int:
    from deployments.repair import serve_repair

    serve_repair(args.interval)
    return 0


def _ui(args: argparse.Namespace) -> int:
    settings = _settings(args)
    api_url = os.environ.get("PREFECT_API_URL")
    home = _prefect_home(settings)
    recorded = recorded_server(home)
    if api_url:
        print(redact_url(api_url.removesuffix("/").removesuffix("/api")))
    elif recorded is not None:
        print(recorded["url"])
        auth = home / AUTH_FILE
        print(
            f"log in with the auth string in {auth} (`cat {auth}`; paste the whole line "
            "into the UI's password field)",
            file=sys.stderr,
        )
    else:
        print(
            "no Prefect server is running for this data folder; start `amaris serve`",
            file=sys.stderr,
        )
        return 1
    return 0


def _check_judge(args: argparse.Namespace) -> int:

    rows = asyncio.run(check_judges(_settings(args)))
    print(render(rows))
    return 1 if any(row.failures for row in rows) else 0


def _offline_llm(args: argparse.Namespace) -> int:

    for name in ("error_rate", "timeout_rate", "malformed_rate"):
        value = getattr(args, name)
        if not 0.0 <= value <= 1.0:
            print(f"--{name.replace('_', '-')} must be within [0, 1]", file=sys.stderr)
            return 2
    profile = FaultProfile(
        args.latency_ms, args.error_rate, args.timeout_rate, args.malformed_rate, args.seed
    )
    print(
        f"amaris offline LLM (rule-based, NOT an LLM) on http://{args.host}:{args.port}/v1 "
        f"latency={args.latency_ms}ms errors={args.error_rate} timeouts={args.timeout_rate} "
        f"malformed={args.malformed_rate}",
        file=sys.stderr,
    )
    uvicorn.run(
        create_llm_app(offline_responder(profile)),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
    )
    return 0


def _rubrics_init(args: argparse.Namespace) -> int:

    settings = _settings(args)
    try:
        client = open_qdrant(settings.memory)
    except StoreLockedError as exc:
        print(f"{exc}; stop the server before `amaris rubrics init`.", file=sys.stderr)
        return 1
    try:
        prefix = settings.memory.collection
        store = RubricStore(client, prefix, settings.memory.rubrics_export_path)
        # A damaged store is restored (or refused) first: the new version's export must
        # not overwrite rubrics.json, the record of the versions the store lost.
        check_rubric_store(store, settings.memory.rubrics_export_path, StepRegistry(client, prefix))
        version = store.reset_from_config(settings)
        print(
            f"rubric version {version.version} created from the configuration "
            f"({len(version.anchors)} anchors, {len(version.adaptive)} adaptive)"
        )
        return 0
    finally:
        client.close()


def _with_settings(
    command: Callable[[Settings, argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A command of :mod:`amaris.cli.inspect`, given the settings its arguments name."""
    return lambda args: command(_settings(args), args)


def _bounded(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is above {high}")
        return value

    return parse


def _store_options(parser: argparse.ArgumentParser, *, json_output: bool = True) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config file (default: ./config.yaml if present, else built-ins)",
    )
    parser.add_argument(
        "--url", default=None, help="server to ask when it holds the store (default: from server:)"
    )
    if json_output:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def _add_rubrics(sub: Any) -> None:
    repair = sub.add_parser("repair", help="re-run failed steps once (the scheduled repair)")
    repair.add_argument("--config", type=Path, default=None)
    repair.add_argument("--url", default=None, help="amaris API (default: from server:)")
    repair.set_defaults(func=_repair)

    # Started by `amaris serve`, which sets AMARIS_REPAIR_URL (and AMARIS_API_KEY).
    worker = sub.add_parser("repair-worker", help=argparse.SUPPRESS)
    worker.add_argument("--interval", type=int, required=True)
    worker.set_defaults(func=_repair_worker)

    ui = sub.add_parser("ui", help="print the Prefect UI address of the running service")
    ui.add_argument("--config", type=Path, default=None)
    ui.set_defaults(func=_ui)

    rubrics = sub.add_parser("rubrics", help="inspect or reset the rubric store")
    actions = rubrics.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the version in force")
    _store_options(show, json_output=False)
    show.set_defaults(func=_with_settings(cli_inspect.rubrics_show))
    init = actions.add_parser("init", help="a new version from the configuration (server stopped)")
    _store_options(init, json_output=False)
    init.set_defaults(func=_rubrics_init)
    history = actions.add_parser("history", help="every version, oldest first")
    _store_options(history)
    history.set_defaults(func=_with_settings(cli_inspect.rubrics_history))
    diff = actions.add_parser("diff", help="criteria added, removed, changed from A to B")
    diff.add_argument("a", type=_bounded(1), metavar="A", help="older version")
    diff.add_argument("b", type=_bounded(1), metavar="B", help="newer version")
    _store_options(diff)
    diff.set_defaults(func=_with_settings(cli_inspect.rubrics_diff))


def _add_memory(sub: Any) -> None:
    # main() imports qdrant_client anyway; amaris.memory adds milliseconds (torch loads lazily).

    memory = sub.add_parser("memory", help="inspect or search the pipeline's memory")
    actions = memory.add_subparsers(dest="action", required=True)
    inspect = actions.add_parser("inspect", help="documents per step and type, recent ones")
    inspect.add_argument(
        "--recent",
        type=_bounded(0, MAX_RECENT),
        default=20,
        help=f"latest documents to list (default 20, at most {MAX_RECENT})",
    )
    _store_options(inspect)
    inspect.set_defaults(func=_with_settings(cli_inspect.memory_inspect))
    search = actions.add_parser("search", help="the documents most similar to a text")
    search.add_argument("query", help="free text")
    search.add_argument(
        "--limit",
        type=_bounded(1, MAX_SEARCH_LIMIT),
        default=5,
        help=f"most hits (default 5, at most {MAX_SEARCH_LIMIT})",
    )
    search.add_argument(
        "--type", choices=sorted(DOC_TYPES), default=None, help="only this document type"
    )
    search.add_argument("--scope", default=None, help="only this scope (default: all)")
    _store_options(search)
    search.set_defaults(func=_with_settings(cli_inspect.memory_search))


def _sim_command(name: str) -> Callable[[argparse.Namespace], int]:
    """A command of :mod:`amaris.cli.simulate`, imported when it runs (matplotlib, httpx)."""

    def command(args: argparse.Namespace) -> int:

        function: Callable[[Settings, argparse.Namespace], int] = getattr(commands, name)
        try:
            return function(_settings(args), args)
        except (AmarisError, DriverError, ServerError, TimeoutError, OSError) as exc:
            raise cli_inspect.CommandError(f"{name}: {exc}", 1) from exc

    return command


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return value


MEMORY_MODES = ("none", "static", "dynamic", "both")
"""The memory modes ``amaris replay`` compares (see docs/simulation.md)."""


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MEMORY_MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown memory mode {', '.join(map(repr, unknown)) or repr(text)} "
            f"(known: {', '.join(MEMORY_MODES)})"
        )
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"a memory mode is repeated in {text!r}")
    return modes


def _add_sim(sub: Any) -> None:
    simulate = sub.add_parser(
        "simulate", help="simulated RL training loop against amaris; writes a report folder"
    )
    simulate.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config of the server started here (default: ./config.yaml if "
        "present, else built-ins: the offline judge)",
    )
    simulate.add_argument(
        "--url", default=None, help="use this running server instead of starting one"
    )
    simulate.add_argument(
        "--steps", type=_bounded(1, 1000), default=10, help="training steps (default 10)"
    )
    simulate.add_argument(
        "--rollouts-per-step",
        type=_bounded(1, 1024),
        default=32,
        help="rollouts per step (default 32)",
    )
    simulate.add_argument("--seed", type=int, default=0, help="seed of tasks and mix (default 0)")
    simulate.add_argument(
        "--group-size",
        type=_bounded(1, 64),
        default=1,
        help="rollouts per prompt, a GRPO group (1-64, default 1)",
    )
    simulate.add_argument(
        "--learning-rate",
        type=_non_negative,
        default=2.0,
        help="how fast the mix follows reward (default 2.0; 0: fixed mix)",
    )
    simulate.add_argument(
        "--out", type=Path, default=Path("sim-report"), help="report folder (default ./sim-report)"
    )
    simulate.add_argument(
        "--ablation",
        action="store_true",
        help="run once per memory mode (none, static, dynamic, both), each on a fresh "
        "server; writes OUT/ablation.json beside the report",
    )
    simulate.set_defaults(func=_sim_command("simulate"))

    replay = sub.add_parser(
        "replay", help="re-run the evolution over recorded rollouts under each memory mode"
    )
    replay.add_argument(
        "rollouts",
        type=Path,
        nargs="?",
        default=None,
        metavar="ROLLOUTS.jsonl",
        help="rollout-log records, as `amaris export` writes them (default with --manifest: "
        "the rollouts of the simulate run it describes)",
    )
    replay.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="a run manifest (manifest-*.json, or a report's manifest.json): replay under "
        "its configuration (secrets from the environment) and record its seed",
    )
    replay.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config of the servers started here (default: ./config.yaml if "
        "present, else built-ins)",
    )
    replay.add_argument(
        "--modes",
        type=_modes,
        default=list(MEMORY_MODES),
        help="comma-separated memory modes (default none,static,dynamic,both)",
    )
    replay.add_argument(
        "--out",
        type=Path,
        default=Path("replay-report"),
        help="report folder (default ./replay-report)",
    )
    replay.set_defaults(func=_sim_command("replay"))

    export = sub.add_parser("export", help="write the rollout log as JSONL")
    _store_options(export, json_output=False)
    export.add_argument("--out", default="-", help="file to write (default -: stdout)")
    export.set_defaults(func=_sim_command("export"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="amaris", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the reward service")
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config file (default: ./config.yaml if present, else built-ins)",
    )
    serve.add_argument("--host", default=None, help="override server.host")
    serve.add_argument("--port", type=int, default=None, help="override server.port")
    serve.set_defaults(func=_serve)

    check = sub.add_parser(
        "check-judge",
        help="probe every agent's LLM endpoint: reachable, model listed, "
        "structured-output mode, one sample scoring, context window",
    )
    check.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config file (default: ./config.yaml if present, else built-ins)",
    )
    check.set_defaults(func=_check_judge)

    _add_rubrics(sub)
    _add_memory(sub)
    _add_sim(sub)
    cli_bootstrap.add_parser(sub).set_defaults(func=_with_settings(cli_bootstrap.run_bootstrap))
    cli_manifest.add_parser(sub).set_defaults(func=_with_settings(cli_manifest.show))

    llm = sub.add_parser("offline-llm", help="serve the offline judge as an OpenAI-compatible API")
    llm.add_argument("--host", default="127.0.0.1")
    llm.add_argument("--port", type=int, default=8011)
    llm.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="answer each request after this many ms (its rules' own work included)",
    )
    llm.add_argument("--error-rate", type=float, default=0.0)
    llm.add_argument("--timeout-rate", type=float, default=0.0)
    llm.add_argument("--malformed-rate", type=float, default=0.0)
    llm.add_argument("--seed", type=int, default=0)
    llm.set_defaults(func=_offline_llm)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except cli_inspect.CommandError as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return exc.code
    except PrefectServerError as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return 1
    except (
        ConfigError,
        PromptError,
        StoreLockedError,
        RubricStoreError,
        MemoryStoreError,
        EmbedderConfigError,
        CollectionMismatchError,
        UnsafeFolderError,
    ) as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
