"""Ranked examples in the Reward Harness dataset format, and the pairs they order.

The file is read as that project writes it::

    {"prompts": [{"prompt_id", "prompt", "candidates": [
        {"candidate_id", "text", "metadata": {"rank": 1, "quality": 0.9}}]}]}

Each prompt has two or more candidates, ordered either by ``metadata.rank`` (1 is best;
used when every candidate of the prompt has one) or by a numeric ``metadata.score`` (or
``metadata.quality``; higher is better). Other fields are ignored. amaris reads one field
more when present: a prompt's ``reference`` (the expected answer), given to the judge as
the rollout's ``supplemental_context``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from amaris.jsonfile import JSONDict, JsonFileError, read_json


class DatasetError(ValueError):
    """The data file cannot be used; the message names the offending field."""


class Candidate(BaseModel):
    """One ranked (or scored) response."""

    model_config = ConfigDict(extra="ignore")

    candidate_id: str = Field(min_length=1)
    text: str
    metadata: JSONDict = Field(default_factory=dict)  # the data file's own, passed on


class RankedPrompt(BaseModel):
    """A prompt and its ranked responses."""

    model_config = ConfigDict(extra="ignore")

    prompt_id: str = Field(min_length=1)
    prompt: str
    reference: str | None = None
    candidates: list[Candidate] = Field(min_length=2)


class Dataset(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="ignore")

    prompts: list[RankedPrompt] = Field(min_length=1)


@dataclass(frozen=True)
class Pair:
    """Two responses to one prompt, the better first; ``top``: the better one is the
    prompt's best response (the top tail, where RL needs the signal most)."""

    prompt_id: str
    better: str
    worse: str
    top: bool


def _quality(candidate: Candidate, by_rank: bool, where: str) -> float:
    """Higher is better: minus the rank, or the score."""
    key = (
        "rank"
        if by_rank
        else next((k for k in ("score", "quality") if k in candidate.metadata), None)
    )
    value = candidate.metadata.get(key) if key else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DatasetError(
            f"{where}.metadata: needs a numeric rank (on every candidate of the prompt), "
            "score or quality"
        )
    if by_rank and value < 1:
        raise DatasetError(f"{where}.metadata.rank: {value} is below 1 (1 is best)")
    return -float(value) if by_rank else float(value)


def qualities(prompt: RankedPrompt, index: int) -> dict[str, float]:
    """Each candidate's quality (higher is better) for prompt number ``index``.

    Raises:
        DatasetError: a candidate has no usable rank or score, or ids repeat.
    """
    where = f"prompts[{index}]"
    ranked = ["rank" in c.metadata for c in prompt.candidates]
    by_rank = all(ranked)
    scored = all("score" in c.metadata or "quality" in c.metadata for c in prompt.candidates)
    if any(ranked) and not by_rank and not scored:
        j = ranked.index(False)
        raise DatasetError(
            f"{where}.candidates[{j}].metadata.rank: missing, while other candidates of the "
            "prompt have one"
        )
    out: dict[str, float] = {}
    for j, candidate in enumerate(prompt.candidates):
        if candidate.candidate_id in out:
            raise DatasetError(
                f"{where}.candidates[{j}].candidate_id: {candidate.candidate_id!r} is repeated"
            )
        out[candidate.candidate_id] = _quality(candidate, by_rank, f"{where}.candidates[{j}]")
    return out


def pairs_of(prompt: RankedPrompt, quality: dict[str, float]) -> list[Pair]:
    """Every pair of the prompt's candidates with a strict order (ties give no pair)."""
    best = max(quality.values())
    ids = [c.candidate_id for c in prompt.candidates]
    pairs = []
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            if quality[a] == quality[b]:
                continue
            better, worse = (a, b) if quality[a] > quality[b] else (b, a)
            pairs.append(Pair(prompt.prompt_id, better, worse, quality[better] == best))
    return pairs


def load_dataset(path: Path) -> tuple[Dataset, dict[str, list[Pair]]]:
    """The file at ``path`` and its pairs per prompt id.

    Raises:
        DatasetError: unreadable, not the format, or no ordered pair in it.
    """
    try:
        raw = read_json(path, "--data")
    except JsonFileError as exc:
        raise DatasetError(str(exc)) from exc
    try:
        dataset = Dataset.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]
        ).lstrip(".")
        raise DatasetError(f"--data {path}: {field or '(top level)'}: {first['msg']}") from None
    pairs: dict[str, list[Pair]] = {}
    for index, prompt in enumerate(dataset.prompts):
        if prompt.prompt_id in pairs:
            raise DatasetError(f"prompts[{index}].prompt_id: {prompt.prompt_id!r} is repeated")
        pairs[prompt.prompt_id] = pairs_of(prompt, qualities(prompt, index))
    if not any(pairs.values()):
        raise DatasetError(f"--data {path}: no two responses of a prompt are ranked apart")
    return dataset, pairs
