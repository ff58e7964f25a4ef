"""``amaris bootstrap``: propose an initial adaptive rubric from ranked examples.

1. split the prompts (seeded) into a search set and a held-out set;
2. ask the judge for candidate criteria from the search set's best and worst responses
   (the updater agent's endpoint, the ``bootstrap`` prompt; the offline rules when no LLM
   is set);
3. judge every response once on the configured criteria plus every candidate, through the
   scorer ``/score`` uses (:class:`~amaris.scoring.scorer.Scorer`);
4. search (:func:`~amaris.bootstrap.search.evolve`) the adaptive criteria and weights whose
   rewards order the search pairs best;
5. keep the result unless it orders the held-out pairs worse than the configured rubric.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field

from amaris.agents.payloads import BootstrapContext, ExampleData
from amaris.agents.prompts import BOOTSTRAP_PROMPT, agent_messages, builtin_prompt
from amaris.agents.schemas import BootstrapCandidates
from amaris.bootstrap.data import Dataset, Pair
from amaris.bootstrap.search import (
    Accuracy,
    Gene,
    Genome,
    Key,
    SearchSpace,
    evolve,
    pairwise_accuracy,
)
from amaris.llm.budget import cut_middle
from amaris.llm.gateway import LLMGateway, LLMOutputError, LLMUnavailableError
from amaris.models import ScoreRequest
from amaris.rubric.model import Criterion, RubricVersion, adaptive_from_config, anchors_from_config
from amaris.scoring.refusals import OversizeError
from amaris.scoring.rules import RuleInputError
from amaris.scoring.scorer import Scorer
from amaris.settings import Settings

PROPOSER_AGENT = "updater"
"""The agent whose endpoint and model propose the candidates: the one that writes criteria."""
EXAMPLE_CHARS = 2000
"""Characters of each response shown to the proposer (head and tail kept)."""
JUDGE_CONCURRENCY = 8
"""Responses judged at once (the gateway's own limits apply too)."""


class BootstrapError(RuntimeError):
    """The bootstrap cannot finish (the judge failed); nothing was written."""


@dataclass(frozen=True)
class Options:
    """The search's knobs (the command's flags)."""

    seed: int = 0
    generations: int = 40
    population: int = 8
    holdout: float = 0.25
    """Share of the prompts held out of the proposal and the search."""
    max_candidates: int = 12
    examples: int = 8
    """Prompts whose best and worst responses the proposer sees."""


@dataclass(frozen=True)
class PoolCriterion:
    """A criterion the search may use: from the configuration or proposed by the judge."""

    text: str
    weight: float
    source: str
    evidence: str = ""


@dataclass
class Result:
    """What the bootstrap found."""

    adaptive: tuple[Criterion, ...]
    pool: list[PoolCriterion]
    accuracy: dict[str, dict[str, Accuracy]]
    """``initial`` / ``bootstrap`` -> ``all`` / ``search`` / ``held_out``."""
    search_prompts: list[str]
    held_out_prompts: list[str]
    kept_initial: bool
    unscored: list[str] = field(default_factory=list)
    """Responses the judge gave no verdict (``prompt_id/candidate_id: reason``), left out."""
    options: Options = field(default_factory=Options)


def split(prompt_ids: list[str], holdout: float, seed: int) -> tuple[list[str], list[str]]:
    """(search, held out): a seeded share ``holdout`` of the prompts held out, at least one
    when there are two or more and ``holdout`` > 0; with one prompt both sets are it."""
    if len(prompt_ids) < 2 or holdout <= 0:
        return list(prompt_ids), list(prompt_ids) if len(prompt_ids) < 2 else []
    shuffled = list(prompt_ids)
    random.Random(seed).shuffle(shuffled)
    count = min(len(shuffled) - 1, max(1, round(len(shuffled) * holdout)))
    held = set(shuffled[:count])
    return [p for p in prompt_ids if p not in held], [p for p in prompt_ids if p in held]


async def propose(
    gateway: LLMGateway,
    dataset: Dataset,
    pairs: dict[str, list[Pair]],
    prompt_ids: list[str],
    existing: list[PoolCriterion],
    options: Options,
) -> list[PoolCriterion]:
    """The judge's candidate criteria from the best and worst responses of ``prompt_ids``.

    Raises:
        BootstrapError: the judge gave no valid answer.
    """
    texts = {(p.prompt_id, c.candidate_id): c.text for p in dataset.prompts for c in p.candidates}
    by_id = {p.prompt_id: p for p in dataset.prompts}
    shown = [p for p in prompt_ids if pairs[p]]
    random.Random(options.seed).shuffle(shown)
    examples: list[ExampleData] = []
    for prompt_id in shown[: options.examples]:
        # The best response against the worst (the one that loses the most pairs): the
        # pair with the most to tell apart.
        best = next(pair.better for pair in pairs[prompt_id] if pair.top)
        worst = Counter(pair.worse for pair in pairs[prompt_id]).most_common(1)[0][0]
        examples.append(
            {
                "prompt": cut_middle(by_id[prompt_id].prompt, EXAMPLE_CHARS),
                "reference": by_id[prompt_id].reference,
                "better": cut_middle(texts[(prompt_id, best)], EXAMPLE_CHARS),
                "worse": cut_middle(texts[(prompt_id, worst)], EXAMPLE_CHARS),
            }
        )
    context: BootstrapContext = {
        "criteria": [
            {"text": c.text, "kind": "pitfall" if c.weight < 0 else "requirement"} for c in existing
        ],
        "max_candidates": options.max_candidates,
    }
    messages = agent_messages(
        "bootstrap", builtin_prompt(BOOTSTRAP_PROMPT), context, {"examples": examples}
    )
    try:
        answer, _ = await gateway.structured_completion(
            PROPOSER_AGENT, messages, BootstrapCandidates
        )
    except (LLMUnavailableError, LLMOutputError) as exc:
        raise BootstrapError(f"the judge proposed no criteria: {exc}") from exc
    seen = {c.text.casefold() for c in existing}
    proposed = []
    for candidate in answer.criteria:
        text = candidate.text.strip()
        if not text or text.casefold() in seen:
            continue
        seen.add(text.casefold())
        weight = -1.0 if candidate.kind == "pitfall" else 1.0
        proposed.append(PoolCriterion(text, weight, "judge", candidate.evidence))
    return proposed[: options.max_candidates]


async def judge_all(
    scorer: Scorer, dataset: Dataset, rubric: RubricVersion
) -> tuple[dict[Key, tuple[float, ...]], list[str]]:
    """Every response's verdicts on ``rubric`` (in its criteria's order), and those the
    judge could not score (never given a made-up verdict)."""
    limit = asyncio.Semaphore(JUDGE_CONCURRENCY)
    verdicts: dict[Key, tuple[float, ...]] = {}
    unscored: list[str] = []

    async def one(prompt_id: str, prompt: str, reference: str | None, cid: str, text: str) -> None:
        request = ScoreRequest.model_validate(
            {
                "rollout": {
                    "id": f"{prompt_id}/{cid}",
                    "input": prompt,
                    "output": text,
                    "supplemental_context": reference,
                }
            }
        )
        try:
            scorer.check(request, rubric)
            async with limit:
                judgement = await scorer.judge(request, rubric)
        except OversizeError as exc:
            unscored.append(f"{prompt_id}/{cid}: oversize: {exc}")
            return
        except RuleInputError as exc:
            unscored.append(f"{prompt_id}/{cid}: no reference answer: {exc}")
            return
        if judgement.breakdown is None:
            unscored.append(f"{prompt_id}/{cid}: {judgement.failure}")
            return
        by_id = {c.id: c.verdict for c in judgement.breakdown}
        verdicts[(prompt_id, cid)] = tuple(float(by_id[c.id]) for c in rubric.criteria)

    await asyncio.gather(
        *(
            one(p.prompt_id, p.prompt, p.reference, c.candidate_id, c.text)
            for p in dataset.prompts
            for c in p.candidates
        )
    )
    return verdicts, sorted(unscored)


async def bootstrap(
    settings: Settings,
    dataset: Dataset,
    pairs: dict[str, list[Pair]],
    gateway: LLMGateway,
    scorer: Scorer,
    options: Options,
) -> Result:
    """Propose, judge, search and check (the module docstring's steps).

    Raises:
        BootstrapError: the judge proposed nothing valid, or no pair could be judged.
    """
    search_ids, held_ids = split(
        [p.prompt_id for p in dataset.prompts], options.holdout, options.seed
    )
    configured = [
        PoolCriterion(c.text, c.weight, "config")
        for c in adaptive_from_config(settings.adaptive_rubrics)
    ]
    anchors = anchors_from_config(settings.anchor_rubrics)
    fixed = [PoolCriterion(a.text, a.weight, "anchor") for a in anchors]
    proposed = await propose(gateway, dataset, pairs, search_ids, [*fixed, *configured], options)
    pool = [*configured, *proposed]
    judged = RubricVersion(
        version=1,
        scope="bootstrap",
        origin="bootstrap",
        anchors=anchors,
        adaptive=tuple(
            Criterion(id=f"R{i}", text=c.text, weight=c.weight, is_anchor=False)
            for i, c in enumerate(pool, start=1)
        ),
    )
    verdicts, unscored = await judge_all(scorer, dataset, judged)
    usable = {
        p: [pair for pair in found if (p, pair.better) in verdicts and (p, pair.worse) in verdicts]
        for p, found in pairs.items()
    }
    if not any(usable.values()):
        raise BootstrapError(f"no pair could be judged; {len(unscored)} responses unscored")
    pipeline = settings.pipeline
    space = SearchSpace(
        anchor_weights=tuple(a.weight for a in anchors),
        signs=tuple(-1 if c.weight < 0 else 1 for c in pool),
        verdicts=verdicts,
        min_weight=pipeline.adaptive_weight_min,
        max_weight=pipeline.adaptive_weight_max,
        max_adaptive=pipeline.max_adaptive_criteria,
    )
    sets = {
        "all": [pair for found in usable.values() for pair in found],
        "search": [pair for p in search_ids for pair in usable[p]],
        "held_out": [pair for p in held_ids for pair in usable[p]],
    }
    initial: Genome = tuple(Gene(i, c.weight) for i, c in enumerate(configured))
    best = evolve(
        space,
        initial,
        sets["search"],
        seed=options.seed,
        generations=options.generations,
        population=options.population,
    )
    accuracy = {
        name: {s: _accuracy(space, genome, pairs_) for s, pairs_ in sets.items()}
        for name, genome in (("initial", initial), ("bootstrap", best))
    }
    held_initial = accuracy["initial"]["held_out"].accuracy
    held_best = accuracy["bootstrap"]["held_out"].accuracy
    kept_initial = held_initial is not None and (held_best or 0.0) < held_initial
    if kept_initial:
        best, accuracy["bootstrap"] = initial, accuracy["initial"]
    adaptive = tuple(
        Criterion(id=f"R{i}", text=pool[g.index].text, weight=g.weight, is_anchor=False)
        for i, g in enumerate(best, start=1)
    )
    return Result(adaptive, pool, accuracy, search_ids, held_ids, kept_initial, unscored, options)


def _accuracy(space: SearchSpace, genome: Genome, pairs: list[Pair]) -> Accuracy:
    return pairwise_accuracy(space.rewards(genome), pairs)
