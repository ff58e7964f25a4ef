"""The bootstrap's report folder: ``report.md`` for people, ``bootstrap.json`` for scripts."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from amaris.bootstrap.run import Options, PoolCriterion, Result
from amaris.bootstrap.search import Accuracy
from amaris.rubric.model import Criterion


class BootstrapJSON(BaseModel):
    """``bootstrap.json``: the typed :class:`Result` for people and tools, with where its
    data and verdicts came from."""

    data: str
    judge: str
    rubric_version: int | None
    accuracy: dict[str, dict[str, Accuracy]]
    """``initial`` / ``bootstrap`` -> ``all`` / ``search`` / ``held_out``."""
    adaptive: tuple[Criterion, ...]
    candidates: list[PoolCriterion]
    search_prompts: list[str]
    held_out_prompts: list[str]
    kept_initial: bool
    unscored: list[str]
    options: Options

    @classmethod
    def of(cls, result: Result, source: str, judge: str, version: int | None) -> BootstrapJSON:
        """The document of ``result``, whose data came from ``source``, judged by ``judge``
        against rubric ``version``."""
        return cls(
            data=source,
            judge=judge,
            rubric_version=version,
            accuracy=result.accuracy,
            adaptive=result.adaptive,
            candidates=result.pool,
            search_prompts=result.search_prompts,
            held_out_prompts=result.held_out_prompts,
            kept_initial=result.kept_initial,
            unscored=result.unscored,
            options=result.options,
        )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _row(name: str, sets: dict[str, Accuracy]) -> str:
    cells = [
        _pct(sets[s].accuracy if not top else sets[s].top_accuracy)
        for top in (False, True)
        for s in ("all", "held_out")
    ]
    return f"| {name} | " + " | ".join(cells) + " |"


def write_report(out: Path, result: Result, source: str, judge: str, version: int | None) -> Path:
    """Write ``out/report.md`` and ``out/bootstrap.json``; returns the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    document = BootstrapJSON.of(result, source, judge, version).model_dump(mode="json")
    (out / "bootstrap.json").write_text(
        json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    everything = result.accuracy["bootstrap"]["all"]
    initial = result.accuracy["initial"]["all"]
    o = result.options
    lines = [
        "# amaris bootstrap",
        "",
        f"Pairwise accuracy: {_pct(everything.accuracy)} (initial rubric from the "
        f"configuration: {_pct(initial.accuracy)}); top tail: {_pct(everything.top_accuracy)} "
        f"(initial: {_pct(initial.top_accuracy)}).",
        "",
        f"Data: {source}: {everything.pairs} ordered pairs ({everything.top_pairs} in the top "
        f"tail) over {len(result.search_prompts)} search prompts and "
        f"{len(result.held_out_prompts)} held-out prompts. Judge: {judge}. Seed {o.seed}, "
        f"{o.generations} generations of {o.population}.",
        "",
        "A pair is right when the better-ranked response gets the higher reward (a tie counts "
        "half); the top tail is the pairs whose better response is its prompt's best.",
        "",
        "| rubric | accuracy, all pairs | held out | top tail, all | top tail, held out |",
        "|---|---|---|---|---|",
        _row("initial (configuration)", result.accuracy["initial"]),
        _row("bootstrap", result.accuracy["bootstrap"]),
        "",
    ]
    if result.kept_initial:
        lines += [
            "The search's best rubric ordered the held-out pairs worse than the configured "
            "one: the configured adaptive criteria are kept.",
            "",
        ]
    where = f"rubric version {version} (origin `bootstrap`)" if version else "not published"
    lines += [f"## Adaptive criteria: {where}", "", "| id | weight | criterion |", "|---|---|---|"]
    lines += [f"| {c.id} | {c.weight:g} | {c.text} |" for c in result.adaptive]
    lines += ["", "## Candidates", "", "| source | weight | criterion | evidence |"]
    lines += ["|---|---|---|---|"]
    lines += [f"| {c.source} | {c.weight:g} | {c.text} | {c.evidence} |" for c in result.pool]
    if result.unscored:
        lines += ["", "## Unscored responses (left out)", ""]
        lines += [f"- {u}" for u in result.unscored]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report
