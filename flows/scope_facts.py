"""What a scope's stages derive from its records (each rollout's group, the rollouts its
analysis flagged, whether any is a trajectory, whether the step updates rubrics), and how a
task takes them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from amaris.agents.schemas import BatchSummary, IndividualAnalysis
from amaris.memory.records import RolloutRecord
from tasks.models import Peer, ScoredAnalysis, is_trajectory


def is_update_step(step: int, frequency: int | None) -> bool:
    """Rubric updates run at steps 0, N, 2N, ... (every step when N is 1 or null)."""
    return not frequency or frequency <= 1 or step % frequency == 0


def group_peers(records: list[RolloutRecord]) -> dict[int, list[Peer]]:
    """For each record (by ``seq``), the other rollouts answering the same prompt (its
    group)."""
    by_group: dict[tuple[str, str], list[RolloutRecord]] = defaultdict(list)
    for record in records:
        rollout = record.rollout
        key = rollout.group_id or rollout.input
        by_group[(record.scope, key)].append(record)
    peers: dict[int, list[Peer]] = {}
    for members in by_group.values():
        for record in members:
            peers[record.seq or 0] = [Peer.of(m) for m in members if m is not record][:16]
    return peers


def has_trajectory(records: Sequence[RolloutRecord]) -> bool:
    """Whether any of a scope's ``records`` is an agent's trajectory: its updater is sent
    the template's trajectory sections."""
    return any(is_trajectory(record.rollout) for record in records)


def flagged(summary: BatchSummary, analyses: Sequence[IndividualAnalysis]) -> list[str]:
    """The rollouts the step's analysis flagged as reward hacking: those an analysis found
    hacking in, and those the summary lists under a hacking behaviour, in that order."""
    found = dict.fromkeys(a.rollout_id for a in analyses if a.reward_hacking_analysis.detected)
    for behaviour in summary.aggregated_reward_hacking.behaviours:
        found.update(dict.fromkeys(behaviour.rollout_ids))
    return list(found)


def with_scores(
    analyses: list[IndividualAnalysis], records: list[RolloutRecord]
) -> list[ScoredAnalysis]:
    """Analyses with the reward each rollout got, as the summarizer reads them."""
    scores = {r.rollout.id: r.score for r in records}
    return [ScoredAnalysis.of(a, scores.get(a.rollout_id)) for a in analyses]
