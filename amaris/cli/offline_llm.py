"""``amaris offline-llm``: the offline judge served as an OpenAI-compatible API (a stand-in
endpoint for runs and tests without an LLM)."""

from __future__ import annotations

import argparse
import sys

import uvicorn

from amaris.sim.judge_server import FaultProfile, create_llm_app, offline_responder
from amaris.sim.rate_limit import EnforcedLimits, RateLimit, limited_responder


def offline_llm(args: argparse.Namespace) -> int:
    """Serve until stopped; 2 if a fault rate is outside [0, 1] or a rate limit is not
    above 0."""
    rates = {
        "--error-rate": args.error_rate,
        "--timeout-rate": args.timeout_rate,
        "--malformed-rate": args.malformed_rate,
    }
    for flag, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            print(f"{flag} must be within [0, 1]", file=sys.stderr)
            return 2
    limits = {
        "--requests-per-minute": args.requests_per_minute,
        "--tokens-per-minute": args.tokens_per_minute,
        "--rate-burst-seconds": args.rate_burst_seconds,
    }
    for flag, value in limits.items():
        if value is not None and value <= 0:
            print(f"{flag} must be above 0", file=sys.stderr)
            return 2
    profile = FaultProfile(
        args.latency_ms, args.error_rate, args.timeout_rate, args.malformed_rate, args.seed
    )
    limit = RateLimit(args.requests_per_minute, args.tokens_per_minute, args.rate_burst_seconds)
    responder = offline_responder(profile)
    if limit.requests_per_minute or limit.tokens_per_minute:
        responder = limited_responder(responder, EnforcedLimits(limit))
    print(
        f"amaris offline LLM (rule-based, NOT an LLM) on http://{args.host}:{args.port}/v1 "
        f"latency={args.latency_ms}ms errors={args.error_rate} timeouts={args.timeout_rate} "
        f"malformed={args.malformed_rate} requests/min={args.requests_per_minute} "
        f"tokens/min={args.tokens_per_minute} burst={args.rate_burst_seconds:g}s",
        file=sys.stderr,
    )
    uvicorn.run(
        create_llm_app(responder),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
    )
    return 0
