"""The report folder of a simulation or a replay: one page (``report.md`` and
``report.html``, the same content, PNGs embedded), ``metrics.json`` and the plots.

The page is built once as a list of blocks (heading, paragraph, table, image, list)
and rendered twice, so the Markdown and the HTML never disagree.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from amaris.jsonfile import JSONDict
from amaris.settings import ModelPrice
from amaris.sim.answers import CriterionJSON
from amaris.sim.driver import RunResult
from amaris.sim.fidelity_plot import has_audit, plot_fidelity
from amaris.sim.metrics import RunMetrics, run_metrics
from amaris.sim.plotting import figure, integer_steps, save
from amaris.sim.usage import UsageSummary


@dataclass(frozen=True)
class Block:
    """One element of the page: ``kind`` in h1/h2/h3/p/table/img/ul."""

    kind: str
    text: str = ""
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    items: tuple[str, ...] = ()


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _rate(count: int, total: int) -> str:
    return "-" if not total else f"{count}/{total} ({count / total:.0%})"


def _dollars(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _usage_cells(u: UsageSummary) -> tuple[str, ...]:  # a usage summary of RunMetrics
    return (
        str(u["calls"]),
        str(u["failed"]),
        str(u["prompt_tokens"]),
        str(u["cached_tokens"]),
        str(u["completion_tokens"]),
        str(u["reasoning_tokens"]),
        f"{u['seconds']:.1f}",
        _dollars(u["cost"]),
        _dollars(u["cost_per_1000_rollouts"]),
    )


_USAGE_HEADER = (
    "calls",
    "failed",
    "prompt",
    "cached",
    "completion",
    "reasoning",
    "seconds waited",
    "cost",
    "per 1,000 rollouts",
)


def usage_blocks(metrics: RunMetrics) -> list[Block]:
    """The run's LLM tokens, time and cost: per step, then per agent and model."""
    rows = [(str(s["step"]), *_usage_cells(s["usage"])) for s in metrics["steps"]]
    rows.append(("all", *_usage_cells(metrics["usage"])))
    agents = [(a["agent"], a["model"], *_usage_cells(a)) for a in metrics["usage_by_agent"]]
    note = (
        "Cost: set `agents.<agent>.price` (or `pricing.<model>`) in the configuration to see it."
        if metrics["usage"]["cost"] is None
        else "Cost in dollars at the configured prices: `agents.<agent>.price`, else "
        "`pricing.<model>` (cached prompt tokens at their own price)."
    )
    return [
        Block("h3", "LLM tokens, time and cost per step (scoring and pipeline)"),
        Block("p", note),
        Block("table", header=("step", *_USAGE_HEADER), rows=tuple(rows)),
        Block("h3", "LLM tokens, time and cost by agent and model"),
        Block("table", header=("agent", "model", *_USAGE_HEADER), rows=tuple(agents)),
    ]


def _criterion(c: CriterionJSON) -> str:  # a criterion of RunMetrics (the server's JSON)
    return f'{c["id"]} (weight {c["weight"]:+.2f}) "{c["text"]}"'


# -- plots -----------------------------------------------------------------------------------
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_STYLES = ("-", "--", "-.", ":")


def plot_rewards(metrics: RunMetrics, path: Path) -> None:
    """Mean reward by behaviour over steps; dashed lines where a new rubric takes force."""
    steps = [s["step"] for s in metrics["steps"]]
    fig, ax = figure(9, 5)
    for index, b in enumerate(metrics["behaviours"]):
        ys = [s["by_behaviour"][b]["mean_reward"] for s in metrics["steps"]]
        # Behaviours often share a value (1 or 0): markers and dashes keep each visible.
        ax.plot(
            steps,
            [float("nan") if y is None else y for y in ys],
            marker=_MARKERS[index % len(_MARKERS)],
            markersize=9 - index,
            linestyle=_STYLES[index % len(_STYLES)],
            label=b,
        )
    overall = [s["mean_reward"] for s in metrics["steps"]]
    ax.plot(
        steps,
        [float("nan") if y is None else y for y in overall],
        color="black",
        linewidth=2.5,
        label="all rollouts",
    )
    for change in metrics["rubric_changes"]:
        x = change["in_force_from_step"]
        if x is None:
            continue
        ax.axvline(x - 0.5, color="grey", linestyle="--", linewidth=1)
        ax.text(x - 0.45, 1.02, f"v{change['version']}", fontsize=8, color="grey")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward")
    integer_steps(ax)
    ax.set_ylim(-0.05, 1.1)
    ax.set_title(f"{metrics['label']}: reward by behaviour (dashed: new rubric version)")
    save(fig, ax, path)


def plot_comparison(all_metrics: Sequence[RunMetrics], path: Path) -> None:
    """Mean reward per step, one line per run (the memory-mode ablation)."""
    fig, ax = figure(9, 5)
    for metrics in all_metrics:
        steps = [s["step"] for s in metrics["steps"]]
        ys = [s["mean_reward"] for s in metrics["steps"]]
        ax.plot(
            steps,
            [float("nan") if y is None else y for y in ys],
            marker="o",
            label=metrics["label"],
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward (re-scored)")
    ax.set_title("mean reward per step by run")
    save(fig, ax, path, legend_outside=False)


# -- page ------------------------------------------------------------------------------------
def run_blocks(metrics: RunMetrics, image: str) -> list[Block]:
    """The section of one run."""
    behaviours, tags = metrics["behaviours"], metrics["tags"]
    memory = metrics.get("memory") or {}
    setup = f"Judge: {metrics['judge']}. Wall time: {metrics['wall_seconds']:.1f} s."
    if memory:
        setup += " Memory: " + ", ".join(f"`memory.{k}: {v}`" for k, v in memory.items()) + "."
    groups = metrics["overall"]["groups"]
    if groups["groups"]:
        setup += (
            f" GRPO groups (same prompt) with zero reward variance: "
            f"{_rate(groups['zero_variance'], groups['groups'])}."
        )
    blocks = [Block("h2", f"Run: {metrics['label']}"), Block("p", setup), Block("img", image)]
    rows = []
    for s in metrics["steps"]:
        cells = [
            str(s["step"]),
            f"v{s['rubric_version']}",
            f"{_reward(s['mean_reward'])} ({s['rollouts']})",
        ]
        for b in behaviours:
            group = s["by_behaviour"][b]
            cells.append(
                f"{_reward(group['mean_reward'])} ({group['rollouts']})"
                if group["rollouts"]
                else "-"
            )
        rows.append(tuple(cells))
    blocks += [
        Block("h3", "Mean reward by behaviour (rollouts in parentheses)"),
        Block("table", header=("step", "rubric", "all", *behaviours), rows=tuple(rows)),
    ]
    if tags:
        rows = [
            tuple([str(s["step"]), *(_rate(s["flagged"][t], s["analysed"]) for t in tags)])
            for s in metrics["steps"]
        ]
        blocks += [
            Block("h3", "Rollouts flagged per step, by reward-hacking tag"),
            Block("table", header=("step", *tags), rows=tuple(rows)),
        ]
        rows = []
        for b in behaviours:
            analysed = sum(s["by_behaviour"][b]["analysed"] for s in metrics["steps"])
            rows.append(
                tuple(
                    [
                        b,
                        *(
                            _rate(
                                sum(s["by_behaviour"][b]["flagged"][t] for s in metrics["steps"]),
                                analysed,
                            )
                            for t in tags
                        ),
                    ]
                )
            )
        blocks += [
            Block("h3", "How often the analyses flagged each behaviour, by tag"),
            Block("table", header=("behaviour", *tags), rows=tuple(rows)),
        ]
    else:
        blocks.append(Block("p", "No analysis flagged any reward hacking."))
    items = []
    for v in metrics["rubric_versions"]:
        adaptive = "; ".join(_criterion(c) for c in v["adaptive"]) or "none"
        made = "" if v["step"] is None else f", published by step {v['step']}"
        parent = "" if v["parent"] is None else f", parent v{v['parent']}"
        items.append(
            f"v{v['version']} ({v['origin']}{parent}{made}): adaptive criteria: {adaptive}"
        )
    for c in metrics["rubric_changes"]:
        changes = [f"+ {_criterion(a)}" for a in c["added"]]
        changes += [f"- {_criterion(r)}" for r in c["removed"]]
        changes += [
            f"~ {ch['id']}: {_criterion(ch['before'])} -> {_criterion(ch['after'])}"
            for ch in c["changed"]
        ]
        first = c["in_force_from_step"]
        items.append(
            f"v{c['parent']} -> v{c['version']} (published by step {c['step']}, "
            f"first scored at step {'-' if first is None else first}): "
            + ("; ".join(changes) or "no change")
        )
    blocks += [Block("h3", "Rubric versions and changes"), Block("ul", items=tuple(items))]
    return blocks + usage_blocks(metrics)


def comparison_blocks(all_metrics: Sequence[RunMetrics], image: str) -> list[Block]:
    """Runs side by side: mean reward per step, flag totals, rubric versions."""
    labels = [m["label"] for m in all_metrics]
    steps = [s["step"] for s in all_metrics[0]["steps"]]
    rows = []
    for index, step in enumerate(steps):
        rows.append(
            tuple([str(step), *(_reward(m["steps"][index]["mean_reward"]) for m in all_metrics)])
        )
    rows.append(tuple(["all", *(_reward(m["overall"]["mean_reward"]) for m in all_metrics)]))
    tags = sorted({t for m in all_metrics for t in m["tags"]})
    flag_rows = [
        tuple(
            [
                tag,
                *(
                    _rate(m["overall"]["flagged"].get(tag, 0), m["overall"]["analysed"])
                    for m in all_metrics
                ),
            ]
        )
        for tag in tags
    ]
    flag_rows.append(
        tuple(["rubric versions", *(str(len(m["rubric_versions"])) for m in all_metrics)])
    )
    flag_rows.append(
        tuple(
            [
                "zero-variance groups",
                *(
                    _rate(m["overall"]["groups"]["zero_variance"], m["overall"]["groups"]["groups"])
                    for m in all_metrics
                ),
            ]
        )
    )
    outcomes = [m["memory_outcomes"] for m in all_metrics]
    memory_rows = (
        ("rubric reversals", *(str(o["reversals"]) for o in outcomes)),
        (
            "resurgent behaviour unpenalised (steps)",
            *(str(o["resurgent_unpenalised_steps"]) for o in outcomes),
        ),
        ("reward gap, correct - hacks", *(_reward(o["reward_gap"]) for o in outcomes)),
    )
    return [
        Block("h2", "Side by side"),
        Block("h3", "What memory changes (docs/simulation.md)"),
        Block("table", header=("", *labels), rows=memory_rows),
        Block("img", image),
        Block("h3", "Mean reward per step (re-scored under each run's evolving rubric)"),
        Block("table", header=("step", *labels), rows=tuple(rows)),
        Block("h3", "Rollouts flagged over the run, by tag; rubric versions"),
        Block("table", header=("", *labels), rows=tuple(flag_rows)),
    ]


def to_markdown(blocks: Sequence[Block]) -> str:
    """The page as Markdown."""
    out: list[str] = []
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            out.append(f"{'#' * int(b.kind[1])} {b.text}")
        elif b.kind == "p":
            out.append(b.text)
        elif b.kind == "img":
            out.append(f"![{b.text}]({b.text})")
        elif b.kind == "ul":
            out.append("\n".join(f"- {item}" for item in b.items))
        elif b.kind == "table":
            aligned = ["---"] + ["---:"] * (len(b.header) - 1)
            lines = ["| " + " | ".join(b.header) + " |", "|" + "|".join(aligned) + "|"]
            lines += ["| " + " | ".join(row) + " |" for row in b.rows]
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def to_html(blocks: Sequence[Block], title: str) -> str:
    """The page as one HTML document (the PNGs sit beside it)."""
    e = html.escape
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
        "img{max-width:100%}</style></head><body>",
    ]
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            out.append(f"<{b.kind}>{e(b.text)}</{b.kind}>")
        elif b.kind == "p":
            out.append(f"<p>{e(b.text)}</p>")
        elif b.kind == "img":
            out.append(f"<p><img src='{e(b.text)}' alt='{e(b.text)}'></p>")
        elif b.kind == "ul":
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif b.kind == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b.header)
            body = "".join(
                "<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in b.rows
            )
            out.append(f"<table><tr>{head}</tr>{body}</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(
    folder: Path,
    runs: Sequence[RunResult],
    title: str,
    intro: Sequence[str] = (),
    extra: JSONDict | None = None,  # what the command adds to metrics.json: its JSON
    pricing: Mapping[str, ModelPrice] | None = None,
    sections: Sequence[Block] = (),
) -> Path:
    """Write ``metrics.json``, the plots, ``report.md`` and ``report.html`` into ``folder``.

    ``pricing``: the configuration's price table by model, for the requests the server did
    not price (it prices each at its agent's price as it counts it).
    ``sections``: what the command adds to the page after its introduction (a scenario's
    figures and plots, already in ``folder``).

    Returns:
        The path of ``report.md``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    all_metrics = [run_metrics(run, pricing) for run in runs]
    blocks = [Block("h1", title), *(Block("p", text) for text in intro), *sections]
    if len(all_metrics) > 1:
        plot_comparison(all_metrics, folder / "compare_mean_reward.png")
        blocks += comparison_blocks(all_metrics, "compare_mean_reward.png")
    for metrics in all_metrics:
        image = f"reward_by_behaviour-{metrics['label']}.png"
        plot_rewards(metrics, folder / image)
        blocks += run_blocks(metrics, image)
        if has_audit(metrics):
            fidelity = f"fidelity-{metrics['label']}.png"
            plot_fidelity(metrics, folder / fidelity, (extra or {}).get("drift_step"))
            blocks += [Block("h3", "Reward fidelity (the audit judge)"), Block("img", fidelity)]
    data = {"title": title, **(extra or {}), "runs": {m["label"]: m for m in all_metrics}}
    (folder / "metrics.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (folder / "report.html").write_text(to_html(blocks, title), encoding="utf-8")
    target = folder / "report.md"
    target.write_text(to_markdown(blocks), encoding="utf-8")
    return target
