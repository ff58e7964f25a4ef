"""Planted URLs in a step's artifacts, opened in Prefect's UI by headless Chromium: the
requests that reach them, and the live images and links on the pages.

Starts ``prefect server`` on 127.0.0.1 (its home in a temporary folder, no auth string, so
that Chromium opens its pages without logging in) and an HTTP listener on 127.0.0.1. Writes
the artifacts amaris writes for a step (summary, rubric diff, hacking table, fidelity)
through its own writers, every string an LLM, the trainer or the policy writes carrying a
Markdown image, two raw-HTML images, a link, a ``javascript:`` link, a script, a bare URL
and an autolink, the URLs aimed at the listener. Once as amaris writes them (``escaped``)
and once with :func:`amaris.text.markdown.inert` replaced by the identity (``raw``: the
strings verbatim, as amaris wrote them before), each mode in a flow run of its own. Then
loads each artifact's page and the flow run's artifacts tab in the V1 (``/``) and V2
(``/v2``) UIs with ``chromium --headless --dump-dom`` (a fresh profile per page, a
virtual-time budget), and counts the requests the listener got while each page loaded,
and the images, links and scripts of the rendered page that point at it (or run
``javascript:``).

Usage::

    .venv/bin/python -m bench.probes.artifact_urls [--modes escaped,raw] [--write] [--smoke]

Needs Chromium (Debian: ``apt-get install -y chromium``; else ``--chromium PATH``).
``--smoke``: one page per mode, the first artifact's, in the V1 UI.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from amaris.app.running import free_port, send_signal, session_pids
from bench._common import (
    ROOT,
    STOP_TIMEOUT_S,
    Child,
    child_env,
    console_script,
    doc_section,
    markers,
    wait_ready,
    work_folder,
    write_doc,
)

NAME = "artifact_urls"
STEP = {"escaped": 1, "raw": 2}
"""The step (flow run ``step-<n>``) each mode's artifacts are written under."""
WHERE = (
    "summary",
    "behaviour",
    "recommendation",
    "rollout-id",
    "why",
    "rationale",
    "reason",
    "criterion",
    "audited",
)
"""The strings planted: a summary, a behaviour's description, a recommendation, a rollout
id, a dropped output's reason, the update's rationale and outcome reason, an added
criterion's text, an audited criterion's text."""
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAGE_TIMEOUT_S = 120.0
UIS = (("V1", ""), ("V2", "/v2"))


class Listener(http.server.BaseHTTPRequestHandler):
    """Records the path of every request; answers 204."""

    paths: list[str] = []
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            self.paths.append(self.path)
        self.send_response(204)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


def planted(base: str, where: str) -> str:
    """What an LLM, the trainer or the policy writes in ``where``: live markup aimed at
    ``base``."""
    url = f"{base}/{where}"
    return (
        f"{where}: ![x]({url}/md-image.png) <img src={url}/html-image.png> "
        f'<img src="{url}/quoted-image.png"> [c]({url}/md-link) [j](javascript:alert(1)) '
        f"<script>alert(2)</script> {url}/bare <{url}/autolink>"
    )


# -- the artifacts ---------------------------------------------------------------------------
@contextmanager
def verbatim(raw: bool) -> Iterator[None]:
    """With ``raw``, amaris's artifact writers take every string as it is."""
    from amaris.trust.audit import report
    from flows import artifacts

    modules = (artifacts, report)
    saved = [module.inert for module in modules]
    try:
        if raw:
            for module in modules:
                module.inert = lambda text, limit=0: text  # type: ignore[attr-defined]
        yield
    finally:
        for module, inert in zip(modules, saved, strict=True):
            module.inert = inert  # type: ignore[attr-defined]


async def write_step(step: int, base: str) -> str:
    """Writes step ``step``'s artifacts as amaris does, with strings planted against
    ``base``; returns the flow run's id."""
    from prefect import flow
    from prefect.artifacts import acreate_markdown_artifact
    from prefect.runtime import flow_run

    from amaris.agents.blocks import CriterionDisagreement
    from amaris.agents.schemas import (
        AggregatedBehaviour,
        AggregatedHackingAnalysis,
        BatchSummary,
        ExecutiveSummary,
        MemoryEntry,
        RubricEvolutionPlan,
        RubricUpdateProposal,
        UpdateRationale,
    )
    from amaris.rubric.model import Criterion, RubricVersion
    from amaris.steps.outcomes import Dropped, scope_outcome
    from amaris.trust.audit.models import StepAudit
    from amaris.trust.audit.report import fidelity_markdown
    from flows import artifacts
    from tasks.models import UpdateOutcome

    rollout_id = planted(base, "rollout-id")
    behaviour = AggregatedBehaviour(
        tag="grader_manipulation",
        description=planted(base, "behaviour"),
        count=2,
        share=0.25,
        rollout_ids=[rollout_id],
    )
    summary = BatchSummary(
        executive_summary=ExecutiveSummary(summary=planted(base, "summary")),
        aggregated_reward_hacking=AggregatedHackingAnalysis(behaviours=[behaviour], detected=True),
        rubric_evolution_plan=RubricEvolutionPlan(
            recommendations=[planted(base, "recommendation")]
        ),
        memory_entry=MemoryEntry(text="step summary"),
    )
    dropped = [Dropped(agent="analyzer", part=f"rollout {rollout_id}", reason=planted(base, "why"))]
    kept = Criterion(id="R1", text="The response shows its reasoning.", weight=0.5, is_anchor=False)
    before = RubricVersion(
        version=1,
        origin="config",
        anchors=(Criterion(id="A1", text="The answer is correct.", weight=1.0, is_anchor=True),),
        adaptive=(kept,),
        next_adaptive_id=2,
    )
    added = Criterion(
        id="R2",
        text=planted(base, "criterion"),
        weight=-1.0,
        is_anchor=False,
        findings=("grader_manipulation",),
    )
    after = before.model_copy(update={"version": 2, "adaptive": (kept, added)})
    proposal = RubricUpdateProposal(
        rationale=UpdateRationale(summary=planted(base, "rationale")), update_strategy="CORRECTIVE"
    )
    outcome = UpdateOutcome(
        outcome="published",
        version=2,
        base_version=1,
        strategy="CORRECTIVE",
        reason=planted(base, "reason"),
    )
    scopes = {"global": scope_outcome(outcome, 8, [behaviour], dropped)}
    audit = StepAudit(
        step=step,
        sampled=8,
        agreement=0.1,
        top_tail_agreement=0.0,
        gap=0.5,
        criteria=[
            CriterionDisagreement(
                id="R2", text=planted(base, "audited"), disagreement=0.5, rollouts=8
            )
        ],
    )

    @flow(name="artifact-urls", flow_run_name=f"step-{step}")
    async def step_run() -> str:
        await artifacts.summary_artifact(step, "global", summary, dropped)
        await artifacts.rubric_diff_artifact(step, "global", before, after, proposal, outcome, [])
        await artifacts.hacking_table_artifact(step, scopes)
        # audit_artifact's markdown and key, without the step registry it reads the trend from
        await acreate_markdown_artifact(
            key=f"fidelity-step-{step}",
            markdown=fidelity_markdown(audit, []),
            description=f"Step {step} reward fidelity (audit judge)",
        )
        return str(flow_run.id)

    return await step_run()


async def artifact_pages(run_id: str) -> list[tuple[str, str]]:
    """(key, id) of the flow run's artifacts."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as prefect:
        found = await prefect.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    return sorted((str(a.key), str(a.id)) for a in found)


# -- the pages -------------------------------------------------------------------------------
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
"""Elements without an end tag."""


class Dom(HTMLParser):
    """What a dumped page holds that aims at ``target``: images, links, scripts; and its
    text, but the V2 UI's hidden "raw data" block (the artifact's source)."""

    def __init__(self, html: str, target: str) -> None:
        super().__init__()
        self.target = target
        self.images = self.links = self.scripts = 0
        self.text: list[str] = []
        self._in_script = False
        self._hidden = 0
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag not in VOID and (self._hidden or values.get("data-testid") == "raw-data-display"):
            self._hidden += 1
        if tag == "img" and self.target in values.get("src", ""):
            self.images += 1
        href = values.get("href", "")
        if tag == "a" and (self.target in href or href.lower().startswith("javascript:")):
            self.links += 1
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False
        if self._hidden and tag not in VOID:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if self._in_script and "alert(2)" in data:
            self.scripts += 1
        if not self._hidden:
            self.text.append(data)


def dump_dom(chromium: str, url: str, budget_ms: int, scratch: Path) -> str:
    """The DOM of ``url`` after ``budget_ms`` of virtual time, in a fresh profile; the
    browser and what it started are stopped by PID, whatever happens."""
    profile = Path(tempfile.mkdtemp(prefix="profile-", dir=scratch))
    argv = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        url,
    ]
    browser = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        out, _ = browser.communicate(timeout=PAGE_TIMEOUT_S)
    finally:
        if browser.poll() is None:
            browser.kill()
            browser.wait(timeout=STOP_TIMEOUT_S)
        for pid in session_pids(browser.pid):
            send_signal(pid, signal.SIGKILL)
        shutil.rmtree(profile, ignore_errors=True)
    return out.decode("utf-8", errors="replace")


@dataclass
class Page:
    """One page loaded: what reached the listener, what the DOM holds."""

    mode: str
    ui: str
    page: str
    requests: int
    images: int
    links: int
    scripts: int
    shown: int
    """Planted strings on the page as text (their ``![x](`` not made an image)."""


def visit(
    chromium: str, server: str, mode: str, run_id: str, pages: list[tuple[str, str]], args: Any
) -> list[Page]:
    """Loads the flow run's artifacts tab and each artifact's page in both UIs."""
    target = f"/{mode}/"
    listener = f"127.0.0.1:{args.listener_port}{target}"
    found: list[Page] = []
    paths = [("artifacts tab", f"/runs/flow-run/{run_id}?tab=Artifacts")]
    paths += [(key, f"/artifacts/artifact/{artifact_id}") for key, artifact_id in pages]
    uis: tuple[tuple[str, str], ...] = UIS
    if args.smoke:
        paths, uis = paths[1:2], UIS[:1]
    for ui, prefix in uis:
        for name, path in paths:
            with Listener.lock:
                before = len(Listener.paths)
            html = dump_dom(chromium, f"{server}{prefix}{path}", args.budget_ms, args.scratch)
            time.sleep(0.2)  # a request the page made as it was dumped is counted with it
            with Listener.lock:
                requests = sum(target in p for p in Listener.paths[before:])
            dom = Dom(html, listener)
            text = "".join(dom.text).replace("\\", "")  # V2 shows a table cell's escapes
            found.append(
                Page(
                    mode,
                    ui,
                    name,
                    requests,
                    dom.images,
                    dom.links,
                    dom.scripts,
                    sum(f"{where}: ![x](" in text for where in WHERE),
                )
            )
            print(f"  {found[-1]}", flush=True)
    return found


# -- the run ---------------------------------------------------------------------------------
def prefect_server(folder: Path, port: int) -> Child:
    """``prefect server start`` on 127.0.0.1:``port``, its home under ``folder``."""
    env = child_env()
    env.update(
        {
            "PREFECT_HOME": str(folder / "prefect-server"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(port),
            "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
        }
    )
    prefect = console_script("prefect")
    return Child(
        "prefect server",
        [prefect, "server", "start", "--no-services"],
        folder / "prefect-server.log",
        folder,
        env,
    )


def pages_table(rows: list[Page]) -> str:
    """One row per page (printed)."""
    return "\n".join(
        [
            "| mode | UI | page | requests | live images | live links | scripts | shown |",
            "|---|---|---|---:|---:|---:|---:|---|",
            *(
                f"| {r.mode} | {r.ui} | {r.page} | {r.requests} | {r.images} | {r.links} | "
                f"{r.scripts} | {r.shown} |"
                for r in rows
            ),
        ]
    )


def report(rows: list[Page], args: Any, version: str) -> str:
    from importlib.metadata import version as installed

    lines = [
        "| mode | UI | pages | requests to the planted URLs | live images | live links "
        "| planted scripts | planted strings shown as text |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, ui in dict.fromkeys((r.mode, r.ui) for r in rows):
        ours = [r for r in rows if (r.mode, r.ui) == (mode, ui)]
        lines.append(
            f"| {mode} | {ui} | {len(ours)} | {sum(r.requests for r in ours)} "
            f"| {sum(r.images for r in ours)} | {sum(r.links for r in ours)} "
            f"| {sum(r.scripts for r in ours)} | {sum(r.shown for r in ours)} |"
        )
    escaped = [r for r in rows if r.mode == "escaped"]
    live = sum(r.requests + r.images + r.links + r.scripts for r in escaped)
    targets = (
        [
            (
                "escaped: nothing planted reaches the listener or renders live",
                f"{live} requests, live images, links and scripts over {len(escaped)} pages",
                "PASS" if live == 0 else "FAIL",
            )
        ]
        if escaped
        else []
    )
    return doc_section(
        NAME,
        "Planted URLs in a step's artifacts, opened in Prefect's UI (headless Chromium)",
        "Every string an LLM, the trainer or the policy writes in a step's summary, rubric "
        "diff, hacking table and fidelity artifacts carries Markdown and HTML images, links, "
        "a `javascript:` link, a script and bare URLs aimed at a listener on 127.0.0.1; each "
        "page is loaded in Prefect's V1 and V2 UIs (`escaped`: amaris's writers; `raw`: the "
        f"strings verbatim, for reference). Prefect {installed('prefect')}, {version}.",
        "\n".join(lines),
        script=__file__,
        targets=targets,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="escaped,raw", help="escaped, raw or both")
    parser.add_argument("--budget-ms", type=int, default=15_000, help="virtual time a page")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--keep", type=Path, default=None, help="keep the work files here")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true", help="one page per mode, the V1 UI")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(STEP):
        parser.error(f"--modes: {args.modes!r} is not a list of {sorted(STEP)}")
    if shutil.which(args.chromium) is None:
        raise SystemExit(f"no Chromium at {args.chromium!r}: apt-get install -y chromium")
    version = subprocess.run(
        [args.chromium, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    args.listener_port = listener.server_address[1]
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    rows: list[Page] = []
    with work_folder("amaris-artifact-urls-", args.keep) as folder:
        args.scratch = folder
        # This process writes the artifacts: its Prefect client talks to that server only.
        os.environ.update(
            {"PREFECT_API_URL": f"{server}/api", "PREFECT_HOME": str(folder / "prefect-client")}
        )
        prefect = prefect_server(folder, port)
        try:
            wait_ready(prefect, f"{server}/api/health", lambda r: True)
            print(f"prefect server pid {prefect.pid} at {server}; listener :{args.listener_port}")
            for mode in modes:
                base = f"http://127.0.0.1:{args.listener_port}/{mode}"
                with verbatim(mode == "raw"):
                    run_id = asyncio.run(write_step(STEP[mode], base))
                pages = asyncio.run(artifact_pages(run_id))
                rows += visit(args.chromium, server, mode, run_id, pages, args)
        finally:
            prefect.stop()
            listener.shutdown()
    text = report(rows, args, version)
    print(pages_table(rows))
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, *markers(NAME))
    return 0


if __name__ == "__main__":
    sys.exit(main())
