"""``amaris rubrics show|init|history|diff``: the rubric store (:mod:`amaris.cli.rubrics`)."""

from __future__ import annotations

from amaris.cli.common import JSON, STORE, SubParsers, bounded, command


def register(sub: SubParsers) -> None:
    """Add ``rubrics`` and its actions."""
    rubrics = sub.add_parser("rubrics", help="inspect or reset the rubric store")
    actions = rubrics.add_subparsers(dest="action", required=True)
    command(
        actions, "show", "amaris.cli.rubrics:show", parents=[STORE], help="the version in force"
    )
    command(
        actions,
        "init",
        "amaris.cli.rubrics:init",
        parents=[STORE],
        help="a new version from the configuration (server stopped)",
    )
    command(
        actions,
        "history",
        "amaris.cli.rubrics:history",
        parents=[STORE, JSON],
        help="every version, oldest first",
    )
    parser = command(
        actions,
        "diff",
        "amaris.cli.rubrics:diff",
        parents=[STORE, JSON],
        help="criteria added, removed, changed from A to B",
    )
    parser.add_argument("a", type=bounded(1), metavar="A", help="older version")
    parser.add_argument("b", type=bounded(1), metavar="B", help="newer version")
