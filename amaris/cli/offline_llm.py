"""``amaris offline-llm``: the offline judge served as an OpenAI-compatible API (a stand-in
endpoint for runs and tests without an LLM)."""

from __future__ import annotations

import argparse
import sys

import uvicorn

from amaris.sim.judge_server import FaultProfile, create_llm_app, offline_responder


def offline_llm(args: argparse.Namespace) -> int:
    """Serve until stopped; 2 if a rate is outside [0, 1]."""
    rates = {
        "--error-rate": args.error_rate,
        "--timeout-rate": args.timeout_rate,
        "--malformed-rate": args.malformed_rate,
    }
    for flag, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            print(f"{flag} must be within [0, 1]", file=sys.stderr)
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
