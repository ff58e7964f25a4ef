"""Links, images and HTML planted by the policy, the trainer or an LLM render as text in a
step's artifacts: Prefect's UI renders markdown artifacts, and in its V1 UI the string
cells of table artifacts, as Markdown (:mod:`amaris.text.markdown`).

Rendered here by markdown-it-py (CommonMark with raw HTML on, as rehype-raw lets it through,
and GFM tables), and the text read for what remark-gfm, in Prefect's V2 UI, links without
markup: its two patterns of literal autolinks, copied from the UI bundle.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from amaris.agents.blocks import CriterionDisagreement
from amaris.sim.judge_server import Reply
from amaris.text.markdown import MAX_CHARS, inert
from amaris.trust.audit.models import Alarm, StepAudit
from amaris.trust.audit.report import fidelity_markdown
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_canary import agent_of
from tests.support.pipeline_helpers import artifacts_keyed, metadata, rollout, step_run_view
from tests.support.settings import llm_settings

STEP = 733
"""A step number no other test's flow run is named after (runs are found by name)."""
PLANTED = (
    "![x](http://127.0.0.1:9/p.png) [c](javascript:alert(1)) "
    "<img src=http://127.0.0.1:9/q.png> <script>alert(2)</script> "
    "http://127.0.0.1:9/r <http://127.0.0.1:9/s> www.example.org ops@example.org"
)
SHOWN = [
    "![x](http[:]//127.0.0.1:9/p.png)",
    "[c](javascript:alert(1))",
    "<img src=http[:]//127.0.0.1:9/q.png>",
    "<script>alert(2)</script>",
    "http[:]//127.0.0.1:9/r",
    "<http[:]//127.0.0.1:9/s>",
    "www[.]example.org",
    "ops[@]example.org",
]
"""How :data:`PLANTED` reads once rendered: as written, its URLs and address defanged."""

MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
LITERAL_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)", re.IGNORECASE)
LITERAL_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")
OUR_TAGS = {"h1", "h2", "p", "br", "strong", "em", "ul", "li", "code"}
OUR_TAGS |= {"table", "thead", "tbody", "tr", "th", "td"}
"""The elements amaris's own markup makes (headings, emphasis, lists, tables)."""


class Page(HTMLParser):
    """The elements, attributes and text nodes of rendered HTML."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.texts: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)

    def handle_data(self, data: str) -> None:
        if data.strip():  # not the newlines between elements
            self.texts.append(data)


def rendered_text(markdown: str) -> str:
    """The text of ``markdown`` rendered, after checking it holds no link, image or HTML of
    its own: only amaris's elements, no URL attribute, no text remark-gfm would link."""
    page = Page(MARKDOWN.render(markdown))
    assert page.tags <= OUR_TAGS, (page.tags - OUR_TAGS, markdown)
    assert not page.attrs & {"href", "src"}, markdown
    for text in page.texts:  # remark-gfm links within one text node
        assert not LITERAL_URL.search(text), (text, markdown)
        assert not LITERAL_EMAIL.search(text), (text, markdown)
    return "\n".join(page.texts)


def defanged(text: str) -> str:
    """``text`` on one line as :func:`inert` shows it."""
    flat = " ".join(text.split()).replace("://", "[:]//").replace("@", "[@]")
    return re.sub(r"(www)\.", r"\1[.]", flat, flags=re.IGNORECASE)


# -- inert on its own ---------------------------------------------------------------------
HOSTILE = [
    PLANTED,
    "\\[c](http://e.example/x) \\<img src=x> \\\\<b>bold</b>",  # escapes of its own
    "http&#58;//e.example/x &lt;img src=x&gt; &#x3C;b&#x3E; &amp;",  # entities
    "`code` ``[c](http://e.example)`` `<img src=x>`",  # code spans
    "**bold** *em* ~~gone~~ ~x~ _em_ __strong__ snake_case_tag a__b",
    "| cell | break |\n|---|---|\n| x | y |",
    "[ref]\n\n[ref]: http://e.example/ref\n![ref]",
    "# heading",
    "- item",
    "+ item",
    "= setext",
    "---",
    "1. first",
    "2) second",
    "> quote",
    "    indented code",
    "```\nfence\n```",
    "~~~ fence",
    "<details open><summary>x</summary>y</details>",
    "HTTPS://E.EXAMPLE/x WwW.e.example ftp://e.example/x mailto:a@e.example",
    "x\\",  # a trailing backslash must not escape what follows
    "a\u2028b\u00a0c\r\nd\te",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_inert_text_renders_as_itself_in_a_paragraph_a_list_item_and_a_table_cell(
    text: str,
) -> None:
    shown = inert(text)
    assert "\n" not in shown
    assert rendered_text(shown) == defanged(text)
    assert rendered_text(f"- {shown}") == defanged(text)
    table = f"| a | b |\n|---|---|\n| {shown} | after |"
    assert rendered_text(table).split("\n") == ["a", "b", defanged(text), "after"]


def test_inert_reads_at_most_its_limit() -> None:
    shown = inert("<" * 100_000)
    assert shown == "\\<" * MAX_CHARS + "…"
    assert inert("x" * 10, limit=4) == "xxxx…"
    assert inert("snake_case_tag") == "snake_case_tag"  # a plain-text table cell shows it


def test_the_fidelity_table_shows_a_criterion_as_text() -> None:
    audit = StepAudit(
        step=1,
        sampled=8,
        agreement=0.1,
        top_tail_agreement=0.0,
        gap=0.5,
        alarm=Alarm(kind="top_tail", reason="the auditor keeps 0%"),
        criteria=[CriterionDisagreement(id="R9", text=PLANTED, disagreement=0.5, rollouts=8)],
    )
    text = rendered_text(fidelity_markdown(audit, []))
    assert all(part in text for part in SHOWN), text


# -- a step ---------------------------------------------------------------------------------
BEHAVIOURS = ["correct", "wrong", "hacking", "hacking", "correct", "hacking"]


def planted_id(index: int) -> str:
    """Rollout ``index``'s id, as a trainer (or a policy choosing it) may send it."""
    return f"{rollout(STEP, index, BEHAVIOURS[index])['id']} {PLANTED}"


DROPPED = rollout(STEP, 1, BEHAVIOURS[1])["id"]
"""The rollout whose analyses are invalid: dropped, its id in the summary's table."""


def planting(body: dict[str, Any]) -> Reply:
    """The offline judge, with :data:`PLANTED` in what the LLM writes of a summary and an
    update, and an invalid analysis of the :data:`DROPPED` rollout."""
    agent = agent_of(body)
    if agent == "analyzer" and any(DROPPED in m["content"] for m in body["messages"]):
        return Reply(content=PLANTED)
    reply = offline_reply(body)
    if agent not in ("summarizer", "meta_summarizer", "updater"):
        return reply
    data = json.loads(reply.content or "")
    if agent == "updater":
        data["rationale"]["summary"] = PLANTED
        for change in data["rubric_modifications"]:
            if change.get("text"):
                change["text"] = f"{change['text']} {PLANTED}"
    else:
        data["executive_summary"]["summary"] = PLANTED
        data["rubric_evolution_plan"]["recommendations"] = [PLANTED]
        for behaviour in data["aggregated_reward_hacking"]["behaviours"]:
            behaviour["description"] = PLANTED
    return Reply(content=json.dumps(data))


@pytest.mark.usefixtures("prefect_harness")
def test_planted_links_images_and_html_render_as_text_in_every_artifact_of_a_step(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.default = planting
    since = datetime.now(UTC)
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"pipeline.rollouts_per_step": None, "pipeline.task_retry_delays_seconds": [0.0]},
    )
    with serve(settings) as client:
        items = [
            {"rollout": {**rollout(STEP, i, b), "id": planted_id(i)}, "metadata": metadata(STEP)}
            for i, b in enumerate(BEHAVIOURS)
        ]
        scored = client.post("/batch_score", json={"items": items}).json()["results"]
        assert [r["status"] for r in scored] == ["scored"] * len(BEHAVIOURS)
        assert client.post("/complete", json={"step": STEP}).status_code == 200
        done = client.get("/rubric_status/wait", params={"step": STEP, "timeout": 120}).json()
    assert done["status"] == "updated", done

    keys = [f"{kind}-step-{STEP}-global" for kind in ("summary", "rubric-diff")]
    keys += [f"{kind}-step-{STEP}" for kind in ("hacking", "criteria", "usage")]
    _, artifacts = asyncio.run(step_run_view(f"step-{STEP}", since, until=artifacts_keyed(*keys)))
    shown: dict[str, str] = {}
    for artifact in artifacts:
        if artifact.type == "markdown":
            shown[artifact.key] = rendered_text(str(artifact.data))
        else:  # the V1 UI renders each string cell as a Markdown document of its own
            rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
            cells = [rendered_text(v) for row in rows for v in row.values() if isinstance(v, str)]
            shown[artifact.key] = "\n".join(cells)
    assert set(keys) <= set(shown), sorted(shown)
    for key in (keys[0], keys[1], f"hacking-step-{STEP}"):
        assert all(part in shown[key] for part in SHOWN), (key, shown[key])
    summary, diff = shown[keys[0]], shown[keys[1]]
    assert summary.count(SHOWN[0]) >= 3  # the summary, a behaviour, a recommendation
    assert f"rollout {DROPPED} {SHOWN[0]}" in summary  # the dropped analysis's rollout
    assert diff.count(SHOWN[0]) >= 2  # the rationale and an added criterion
