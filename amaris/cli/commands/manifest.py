"""``amaris manifest``: the run manifests in a data folder (:mod:`amaris.cli.manifest`)."""

from __future__ import annotations

from pathlib import Path

from amaris.cli.common import CONFIG, SubParsers, command


def register(sub: SubParsers) -> None:
    """Add ``manifest``."""
    parser = command(
        sub,
        "manifest",
        "amaris.cli.manifest:show",
        parents=[CONFIG],
        help="show the newest run manifest of the data folder",
    )
    parser.add_argument(
        "--data", type=Path, default=None, help="data folder (default: memory.path)"
    )
    parser.add_argument("--list", action="store_true", help="every manifest, oldest first")
    parser.add_argument("--json", action="store_true", help="the whole manifest as JSON")
