"""What each agent reads: its context and data blocks (:mod:`amaris.agents.prompts`).

The blocks' shapes are amaris's own (the pipeline's tasks, the scorer, ``amaris
bootstrap`` write them), so each is a ``TypedDict``. The analyzer's, the scorer's
(:class:`CriteriaContext`, :class:`ScorerInput`) and ``amaris bootstrap``'s
(:class:`BootstrapContext`, :class:`BootstrapInput`) are written as the ones here; the
other pipeline tasks write theirs with amaris's models in them (:mod:`amaris.agents.blocks`).
The ``*Data`` types list the keys the offline agents read of the blocks' JSON (a block may
carry more).

The offline agents (:mod:`amaris.offline`) stand in for an LLM, so they read the JSON an
LLM agent would: an agent's blocks, merged (:func:`amaris.agents.prompts.read_data`), as
the ``*Data`` type of the agent. A block that lacks a key or holds a value of another type
makes the handler fail (``KeyError``, ``TypeError``), which the offline judge reports as a
malformed block. The JSON of an agent's own output (an analysis, a summary) is read back
through the agent's model (:mod:`amaris.agents.schemas`), never as a dict. Each agent
answers with its model; the judge dumps it once (:mod:`amaris.offline.judge`).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from amaris.jsonfile import JSONDict


class CriterionData(TypedDict):
    """A criterion as an agent is shown it: the pipeline's agents get every field
    (``tasks.models.AgentCriterion``), the scorer no weight, ``amaris bootstrap``'s
    proposer only the text and kind."""

    id: NotRequired[str]
    text: str
    weight: NotRequired[float]
    kind: str
    is_anchor: NotRequired[bool]


class RolloutData(TypedDict):
    """The rollout the scorer judges and the analyzer analyses (the scorer's has no id)."""

    input: str
    supplemental_context: str | None
    id: NotRequired[str]
    output: str
    turns: NotRequired[list[int]]
    """A trajectory's assistant message indexes (the scorer's, of a trajectory only)."""


class PeerData(TypedDict):
    """Another rollout of the analyzed one's group (``tasks.models.Peer``)."""

    id: str
    output: str
    score: float | None


class AlarmRolloutData(TypedDict, total=False):
    """A rollout of a fidelity alarm's evidence (``amaris.agents.blocks.DisagreeingRollout``)."""

    output: str
    output_words: int | None


class AlarmData(TypedDict, total=False):
    """A fidelity alarm's evidence (``amaris.agents.blocks.AlarmEvidence``)."""

    step: int
    reason: str
    rollouts: list[AlarmRolloutData]


class CriteriaContext(TypedDict):
    """The rubric in force, the context block of the scorer, the summarizers and the query
    generator."""

    criteria: list[CriterionData]


class ScorerInput(TypedDict):
    """The scorer's data block: the rollout it judges."""

    rollout: RolloutData


class ScorerData(CriteriaContext, ScorerInput):
    """The scorer's blocks (:func:`amaris.scoring.judge_protocol.judge_messages`)."""


class ScorerVerdict(TypedDict):
    """A verdict of the scorer's answer."""

    id: str
    reason: str
    score: int
    turns: NotRequired[list[int]]
    """Of a trajectory: the turns the criterion is attributed to."""


class ScorerAnswer(TypedDict):
    """The scorer's answer: the JSON its schema asks for (the service validates it with
    ``amaris.scoring.judge_protocol.JudgeVerdicts``, a layer above this one)."""

    verdicts: list[ScorerVerdict]


class LabelledOutput(TypedDict):
    """One rollout of a group as the listwise scorer is shown it: its label and response."""

    label: str
    output: str


class GroupScorerInput(TypedDict):
    """The listwise scorer's data block: a group's shared prompt and reference, then its
    responses, each under its label (``amaris.scoring.group_protocol``)."""

    input: str
    supplemental_context: str | None
    rollouts: list[LabelledOutput]


class GroupScorerData(CriteriaContext, GroupScorerInput):
    """The listwise scorer's blocks."""


class LabelVerdicts(TypedDict):
    """One label's verdicts in the listwise scorer's answer."""

    label: str
    verdicts: list[ScorerVerdict]


class GroupScorerAnswer(TypedDict):
    """The listwise scorer's answer: per label, a verdict per criterion."""

    rollouts: list[LabelVerdicts]


class AnalyzerContext(TypedDict):
    """The analyzer's context block: the rubric in force, and a fidelity alarm's evidence
    when one fired (shared by every analysis of the scope)."""

    criteria: list[CriterionData]
    fidelity_alarm: NotRequired[AlarmData]


class AnalyzerInput(TypedDict):
    """The analyzer's data block: one rollout, its reward and its group's other rollouts."""

    # The trainer's metadata of the rollout: whatever the trainer sent (it is open in the
    # API too, amaris.models.Rollout.metadata); the rules read current_step, total_steps.
    metadata: JSONDict | None
    rollout: RolloutData
    score: float | None
    verdicts: list[object]
    """Each the JSON of an ``amaris.memory.records.LoggedVerdict`` as logged (its set
    fields); the offline rules do not read them."""
    group: list[PeerData]


class AnalyzerData(AnalyzerContext, AnalyzerInput):
    """The analyzer's blocks, merged (``tasks.analyze.analyze_one``)."""


class ScoreStats(TypedDict, total=False):
    """The statistics of a step's rewards the summarizers read."""

    count: int
    scored: int
    mean: float | None
    min: float | None
    max: float | None


class SummarizerData(TypedDict, total=False):
    """The summarizer's blocks (``tasks.summarize.summary_payload``)."""

    step: int
    score_stats: ScoreStats
    analyses: list[object]
    """Each the JSON of an :class:`~amaris.agents.schemas.IndividualAnalysis` (with its
    ``score``), read through that model."""


class MetaSummarizerData(TypedDict, total=False):
    """The meta-summarizer's blocks (``tasks.meta_summarize``)."""

    step: int
    score_stats: ScoreStats
    summaries: list[SummaryData]


class HackingData(TypedDict, total=False):
    """A summary's ``aggregated_reward_hacking``."""

    behaviours: list[object]
    """Each the JSON of an :class:`~amaris.agents.schemas.AggregatedBehaviour`, read
    through it."""


class SectionData(TypedDict, total=False):
    """The free-text sections of a summary the meta-summarizer merges."""

    summary: str
    trend: str
    notes: str
    gaps: list[str]
    recommendations: list[str]


class SummaryData(TypedDict, total=False):
    """The JSON of a :class:`~amaris.agents.schemas.BatchSummary`, as the offline rules read
    it: only its behaviours are required (a hand-written summary may hold no more), each
    read through :class:`~amaris.agents.schemas.AggregatedBehaviour`."""

    executive_summary: SectionData
    systemic_patterns: list[object]
    """Each the JSON of a :class:`~amaris.agents.schemas.SystemicPattern`, read through it."""
    aggregated_reward_hacking: HackingData
    rubric_meta_evaluation: SectionData
    performance_advancement_analysis: SectionData
    rubric_evolution_plan: SectionData


class QueryGeneratorData(TypedDict, total=False):
    """The query generator's blocks (``tasks.generate_queries``)."""

    criteria: list[CriterionData]
    step: int
    max_queries: int
    summary: SummaryData


class BoundsData(TypedDict, total=False):
    """The update bounds the updater is shown (each may be absent: no bound)."""

    max_adaptive: int | None
    min_weight: float | None
    max_weight: float | None
    max_modifications: int | None


class MemoryItem(TypedDict, total=False):
    """A memory the updater is shown (``tasks.models.StaticMemory`` /
    ``DynamicMemory``), ``type`` ``static`` for the static ones."""

    type: str
    step: int
    text: str


class DueData(TypedDict):
    """A criterion due to be retired (``amaris.rubric.informativeness.DueCriterion``)."""

    criterion_id: str
    evidence: str


class UpdaterData(TypedDict, total=False):
    """The updater's blocks (``tasks.update_rubric.propose_update``)."""

    criteria: list[CriterionData]
    bounds: BoundsData
    step: int
    summary: SummaryData
    static_memory: list[MemoryItem]
    dynamic_memory: list[MemoryItem]
    uninformative: list[DueData]
    fidelity_alarm: AlarmData


class ExampleData(TypedDict, total=False):
    """A ranked example ``amaris bootstrap`` shows its proposer."""

    prompt: str
    reference: str | None
    better: str
    worse: str


class BootstrapContext(TypedDict):
    """``amaris bootstrap``'s proposer's context block: the criteria it has, as text and
    kind, and how many it may propose (``amaris.bootstrap.run``)."""

    criteria: list[CriterionData]
    max_candidates: int


class BootstrapInput(TypedDict):
    """``amaris bootstrap``'s proposer's data block: the ranked examples."""

    examples: list[ExampleData]


class BootstrapData(TypedDict, total=False):
    """``amaris bootstrap``'s proposer's blocks (``amaris.bootstrap.run``)."""

    criteria: list[CriterionData]
    max_candidates: int
    examples: list[ExampleData]
