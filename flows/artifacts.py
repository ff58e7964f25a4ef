"""Markdown and tables attached to step runs (rubric diff, summary, hacking findings)."""

from __future__ import annotations

from typing import Any

from amaris.llm.judge_wait import StepJudgeWait
from amaris.rubric import RubricVersion


def rubric_diff_markdown(before: RubricVersion, after: RubricVersion,
                         proposal: dict[str, Any], outcome: dict[str, Any]) -> str:
    """Human-readable diff of the adaptive rubric, with the strategy and rationale."""
    old = {c.id: c for c in before.adaptive}
    new = {c.id: c for c in after.adaptive}
    lines = [
        f"# Rubric update: version {before.version} -> {after.version}",
        "",
        f"**Outcome:** {outcome.get('outcome')}"
        + (f" ({outcome['reason']})" if outcome.get("reason") else ""),
        f"**Strategy:** {proposal.get('update_strategy')}",
        "",
        f"**Rationale:** {proposal.get('rationale', {}).get('summary', '')}",
        "",
        "| change | id | weight | criterion |",
        "|---|---|---|---|",
    ]
    for cid, c in new.items():
        if cid not in old:
            lines.append(f"| added | {cid} | {c.weight:+.2f} | {c.text} |")
        elif old[cid] != c:
            lines.append(f"| changed | {cid} | {old[cid].weight:+.2f} -> {c.weight:+.2f} | "
                         f"{old[cid].text} -> {c.text} |")
    for cid, c in old.items():
        if cid not in new:
            lines.append(f"| retired | {cid} | {c.weight:+.2f} | {c.text} |")
    if len(lines) == 10:
        lines.append("| (none) | | | |")
    return "\n".join(lines)


def summary_markdown(step: int, scope: str, summary: dict[str, Any]) -> str:
    """The step summary as markdown."""
    hacking = summary.get("aggregated_reward_hacking", {})
    lines = [f"# Step {step} summary ({scope})", "",
             summary.get("executive_summary", {}).get("summary", ""), "",
             "## Reward hacking"]
    behaviours = hacking.get("behaviours", [])
    lines += [f"- **{b.get('tag')}**: {b.get('count')} rollouts ({b.get('share', 0):.0%}) "
              f"{b.get('description', '')}" for b in behaviours] or ["- none detected"]
    lines += ["", "## Recommendations"]
    lines += [f"- {r}" for r in summary.get("rubric_evolution_plan", {})
              .get("recommendations", [])] or ["- none"]
    return "\n".join(lines)


def hacking_table(outcome: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows ``scope, tag, count, share, examples`` for every scope of a step outcome."""
    rows = []
    for scope, result in outcome.get("scopes", {}).items():
        for b in result.get("hacking", []):
            rows.append({"scope": scope, "tag": b.get("tag"), "count": b.get("count"),
                         "share": round(float(b.get("share", 0.0)), 3),
                         "examples": ", ".join(b.get("rollout_ids", [])[:5])})
    return rows


def judge_wait_line(wait: StepJudgeWait, failed: bool = False) -> str:
    """One line: how long the step waited on the judge, and its failed calls."""
    return (f"waited {wait.wait_seconds:.1f} s on the judge{' before it failed' if failed else ''}"
            f" ({wait.calls} calls, {sum(wait.call_seconds.values()):.1f} call-seconds; "
            f"{wait.failed} failed, {wait.timed_out} of them timed out)")


def judge_wait_markdown(step: int, wait: StepJudgeWait, failed: bool = False) -> str:
    """The step's judge wait, with its call-seconds per agent."""
    lines = [f"# Step {step}: time waiting on the judge", "",
             f"**{judge_wait_line(wait, failed)}**", "",
             "Wait: wall time with at least one judge call outstanding (queueing for a "
             "concurrency slot included). Call-seconds: the calls' durations summed.", "",
             "| agent | call-seconds |", "|---|---:|"]
    lines += [f"| {agent} | {seconds:.1f} |" for agent, seconds in
              sorted(wait.call_seconds.items())] or ["| (no calls) | 0.0 |"]
    return "\n".join(lines)
