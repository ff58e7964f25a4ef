"""What writing the run manifest adds to ``amaris serve``'s start-up: build + write, timed.

    python -m bench.performance.manifest_cost [--runs N] [--smoke]

Prints the median and the maximum over N runs (default 20) of ``build_manifest`` (package
versions, git commit, config redaction and hash, prompt fingerprints) plus ``write_manifest``
into a temporary folder. Results: docs/benchmarks.md ("Run manifest: start-up cost").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from amaris.agents.prompts import load_prompts
from amaris.manifest import build_manifest, write_manifest
from amaris.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="one run")
    args = parser.parse_args(argv)
    runs = 1 if args.smoke else args.runs
    settings = Settings()
    prompts = load_prompts(settings.prompts)
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(runs):
            started = time.perf_counter()
            write_manifest(build_manifest(settings, prompts, "serve"), Path(folder))
            times.append((time.perf_counter() - started) * 1000)
    print(
        f"build + write manifest: median {statistics.median(times):.1f} ms, "
        f"max {max(times):.1f} ms over {runs} runs"
    )


if __name__ == "__main__":
    main()
