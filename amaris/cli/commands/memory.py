"""``amaris memory inspect|search``: the pipeline's searchable memory (:mod:`amaris.cli.memory`)."""

from __future__ import annotations

from amaris.cli.common import JSON, STORE, SubParsers, bounded, command

# The API's bounds and document types (amaris.memory.inspection, amaris.memory.models),
# spelled here because importing amaris.memory loads Qdrant: tests/app/test_cli_layout.py
# checks that they agree.
MAX_RECENT = 1000
MAX_SEARCH_LIMIT = 100
DOC_TYPES = ("batch_summary", "finding", "meta_summary", "rubric_update")


def register(sub: SubParsers) -> None:
    """Add ``memory`` and its actions."""
    memory = sub.add_parser("memory", help="inspect or search the pipeline's memory")
    actions = memory.add_subparsers(dest="action", required=True)
    parser = command(
        actions,
        "inspect",
        "amaris.cli.memory:inspect",
        parents=[STORE, JSON],
        help="documents per step and type, recent ones",
    )
    parser.add_argument(
        "--recent",
        type=bounded(0, MAX_RECENT),
        default=20,
        help=f"latest documents to list (default 20, at most {MAX_RECENT})",
    )
    parser = command(
        actions,
        "search",
        "amaris.cli.memory:search",
        parents=[STORE, JSON],
        help="the documents most similar to a text",
    )
    parser.add_argument("query", help="free text")
    parser.add_argument(
        "--limit",
        type=bounded(1, MAX_SEARCH_LIMIT),
        default=5,
        help=f"most hits (default 5, at most {MAX_SEARCH_LIMIT})",
    )
    parser.add_argument("--type", choices=DOC_TYPES, default=None, help="only this document type")
    parser.add_argument("--scope", default=None, help="only this scope (default: all)")
