"""``amaris bootstrap``: the Reward Harness format read as is, pairwise accuracy checked by
hand, the search against the configured rubric on the shipped example, and the rewards it
reports equal to those ``/score``'s path gives under the published version."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from amaris.agents.prompts import load_prompts
from amaris.bootstrap.data import DatasetError, Pair, load_dataset
from amaris.bootstrap.run import Options, bootstrap
from amaris.bootstrap.search import Gene, SearchSpace, evolve, pairwise_accuracy
from amaris.cli.main import main
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.memory.qdrant import open_qdrant
from amaris.models import ScoreRequest
from amaris.offline.bootstrap import handle_bootstrap
from amaris.rubric.model import anchors_from_config
from amaris.rubric.store import RubricStore
from amaris.scoring.reward import reward_of
from amaris.scoring.scorer import Scorer
from amaris.settings import Settings, load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bootstrap_ranked.json"


def _write(path: Path, prompts: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"prompts": prompts}))
    return path


def _candidate(cid: str, **metadata: object) -> dict[str, object]:
    return {"candidate_id": cid, "text": f"text of {cid}", "metadata": metadata}


# -- pairwise accuracy, by hand ---------------------------------------------------------------
def test_pairwise_accuracy_on_a_tiny_dataset_checked_by_hand(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "tiny.json",
        [
            {
                "prompt_id": "p",
                "prompt": "q",
                "candidates": [
                    _candidate("a", rank=1),
                    _candidate("b", rank=2),
                    _candidate("c", rank=3),
                ],
            }
        ],
    )
    _, pairs = load_dataset(data)
    # three pairs, the better first; the two with "a" (the best) are the top tail
    assert pairs["p"] == [
        Pair("p", "a", "b", True),
        Pair("p", "a", "c", True),
        Pair("p", "b", "c", False),
    ]
    # a > b right, a > c right, b < c wrong: 2 of 3; top tail 2 of 2
    rewards = {("p", "a"): 0.9, ("p", "b"): 0.5, ("p", "c"): 0.7}
    acc = pairwise_accuracy(rewards, pairs["p"])
    assert (acc.pairs, acc.accuracy, acc.top_pairs, acc.top_accuracy, acc.ties) == (
        3,
        pytest.approx(2 / 3),
        2,
        1.0,
        0,
    )
    # a tie counts half: a = b (0.5), a > c (1), b > c (1): 2.5 of 3; top tail 1.5 of 2
    tied = pairwise_accuracy({("p", "a"): 0.5, ("p", "b"): 0.5, ("p", "c"): 0.1}, pairs["p"])
    assert (tied.accuracy, tied.top_accuracy, tied.ties) == (pytest.approx(2.5 / 3), 0.75, 1)


def test_scores_order_like_ranks_and_equal_scores_give_no_pair(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "scored.json",
        [
            {
                "prompt_id": "p",
                "prompt": "q",
                "candidates": [
                    _candidate("low", score=0.1),
                    _candidate("high", quality=0.9),
                    _candidate("mid", score=0.5),
                    _candidate("mid2", score=0.5),
                ],
            }
        ],
    )
    _, pairs = load_dataset(data)
    assert sorted((p.better, p.worse) for p in pairs["p"]) == sorted(
        [("high", "low"), ("mid", "low"), ("mid2", "low"), ("high", "mid"), ("high", "mid2")]
    )


@pytest.mark.parametrize(
    ("prompts", "field"),
    [
        (
            [{"prompt_id": "p", "prompt": "q", "candidates": [_candidate("a", rank=1)]}],
            "prompts[0].candidates",
        ),
        (
            [
                {
                    "prompt_id": "p",
                    "prompt": "q",
                    "candidates": [_candidate("a", rank=1), _candidate("b")],
                }
            ],
            "prompts[0].candidates[1].metadata.rank",
        ),
        (
            [
                {
                    "prompt_id": "p",
                    "prompt": "q",
                    "candidates": [_candidate("a", rank=1), _candidate("a", rank=2)],
                }
            ],
            "prompts[0].candidates[1].candidate_id",
        ),
        ([{"prompt": "q", "candidates": []}], "prompts[0].prompt_id"),
        (
            [
                {
                    "prompt_id": "p",
                    "prompt": "q",
                    "candidates": [_candidate("a", rank=0), _candidate("b", rank=2)],
                }
            ],
            "prompts[0].candidates[0].metadata.rank",
        ),
    ],
)
def test_bad_data_is_refused_naming_the_field(
    tmp_path: Path, prompts: list[dict[str, object]], field: str
) -> None:
    with pytest.raises(DatasetError, match=re.escape(f"{field}:")):
        load_dataset(_write(tmp_path / "bad.json", prompts))


# -- the search ------------------------------------------------------------------------------
def test_search_never_ends_worse_than_where_it_started_and_is_seeded() -> None:
    # one anchor judged 4 everywhere (no signal); pool criterion 0 orders the pairs,
    # criterion 1 orders them backwards
    verdicts = {
        ("p", "a"): (4.0, 4.0, 0.0),
        ("p", "b"): (4.0, 2.0, 2.0),
        ("p", "c"): (4.0, 0.0, 4.0),
    }
    pairs = [Pair("p", "a", "b", True), Pair("p", "a", "c", True), Pair("p", "b", "c", False)]
    space = SearchSpace((1.0,), (1, 1), verdicts, -2.0, 2.0, 4)
    wrong = (Gene(1, 1.0),)
    assert pairwise_accuracy(space.rewards(wrong), pairs).accuracy == 0.0
    found = evolve(space, wrong, pairs, seed=1, generations=10, population=4)
    assert pairwise_accuracy(space.rewards(found), pairs).accuracy == 1.0
    assert found == evolve(space, wrong, pairs, seed=1, generations=10, population=4)


def test_offline_judge_proposes_what_separates_better_from_worse() -> None:
    reply = handle_bootstrap(
        {
            "criteria": [{"text": "The response gives the correct final answer.", "kind": "x"}],
            "max_candidates": 12,
            "examples": [
                {
                    "prompt": "6*7?",
                    "reference": "42",
                    "better": "Answer: 42",
                    "worse": "It is 41 or 42.",
                },
                {
                    "prompt": "2+2?",
                    "reference": "4",
                    "better": "Answer: 4",
                    "worse": "Either 3 or 4.",
                },
            ],
        }
    ).model_dump(mode="json")
    proposed = {(c["text"], c["kind"]) for c in reply["criteria"]}
    assert ("The response offers several candidate answers.", "pitfall") in proposed
    assert ("The response commits to a single final answer.", "requirement") in proposed
    # already in the rubric, and no difference: not proposed
    texts = {t for t, _ in proposed}
    assert "The response gives the correct final answer." not in texts
    assert "The response flatters the user." not in texts


# -- the whole bootstrap on the shipped example ------------------------------------------------
async def test_bootstrap_beats_the_configured_rubric_with_the_rewards_score_gives() -> None:
    settings = Settings()
    dataset, pairs = load_dataset(EXAMPLE)
    gateway = LLMGateway(settings, build_providers(settings), CallLog(None))
    qdrant = open_qdrant(settings.memory, location=":memory:")
    try:
        store = RubricStore(qdrant, "t", None)
        scorer = Scorer(settings.scoring, gateway, store, _scorer_prompt(settings))
        result = await bootstrap(settings, dataset, pairs, gateway, scorer, Options(seed=0))
        again = await bootstrap(settings, dataset, pairs, gateway, scorer, Options(seed=0))
        assert again.adaptive == result.adaptive  # seeded: the same rubric
        initial, found = result.accuracy["initial"], result.accuracy["bootstrap"]
        assert initial["all"].pairs == 12 * 6 and initial["all"].top_pairs == 12 * 3
        assert found["all"].accuracy > initial["all"].accuracy
        assert found["held_out"].accuracy >= initial["held_out"].accuracy
        assert result.held_out_prompts and not set(result.held_out_prompts) & set(
            result.search_prompts
        )
        # The figures are /score's: publish the rubric, score every response through the
        # hot path's reward_of, and the accuracy of those rewards is the one reported.
        version = store.publish(
            anchors=anchors_from_config(settings.anchor_rubrics),
            adaptive=result.adaptive,
            origin="bootstrap",
            step=None,
            next_adaptive_id=len(result.adaptive) + 1,
        )
        rewards = {}
        for prompt in dataset.prompts:
            for c in prompt.candidates:
                answer = await reward_of(
                    scorer, _request(prompt.prompt, prompt.reference, c.text), version
                )
                assert answer.score is not None
                rewards[(prompt.prompt_id, c.candidate_id)] = answer.score
        every = [pair for found_pairs in pairs.values() for pair in found_pairs]
        assert pairwise_accuracy(rewards, every) == found["all"]
    finally:
        await gateway.close()
        qdrant.close()


def _scorer_prompt(settings: Settings) -> str:
    return load_prompts(settings.prompts)["scorer"]


def _request(prompt: str, reference: str | None, text: str) -> ScoreRequest:
    return ScoreRequest.model_validate(
        {"rollout": {"id": "x", "input": prompt, "output": text, "supplemental_context": reference}}
    )


# -- the command -----------------------------------------------------------------------------
def _config(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"memory": {"path": str(tmp_path / "data")}}))
    return config


def test_command_publishes_a_bootstrap_version_and_states_the_accuracy(tmp_path: Path) -> None:
    config, out = _config(tmp_path), tmp_path / "out"
    assert (
        main(["bootstrap", "--data", str(EXAMPLE), "--out", str(out), "--config", str(config)]) == 0
    )
    report = (out / "report.md").read_text()
    summary = json.loads((out / "bootstrap.json").read_text())
    accuracy = summary["accuracy"]["bootstrap"]["all"]["accuracy"]
    assert f"Pairwise accuracy: {accuracy:.3f}" in report
    settings = load_settings(config)
    qdrant = open_qdrant(settings.memory)
    try:
        current = RubricStore(qdrant, settings.memory.collection, None).current()
    finally:
        qdrant.close()
    assert current.origin == "bootstrap" and current.version == summary["rubric_version"]
    assert [c.text for c in current.adaptive] == [c["text"] for c in summary["adaptive"]]
    # the run manifest: in the report folder and, the version being published, the data folder
    (recorded,) = settings.memory.path.glob("manifest-*-bootstrap.json")
    manifest = json.loads(recorded.read_text())
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert (manifest["kind"], manifest["seed"]) == ("bootstrap", 0)
    assert manifest["extra"]["rubric_version"] == current.version
    assert manifest["extra"]["data"] == str(EXAMPLE.resolve())


def test_dry_run_records_its_manifest_in_the_report_only(tmp_path: Path) -> None:
    config, out = _config(tmp_path), tmp_path / "out"
    args = ["bootstrap", "--data", str(EXAMPLE), "--out", str(out), "--config", str(config)]
    assert main([*args, "--dry-run", "--seed", "2"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["seed"], manifest["extra"]["rubric_version"]) == (2, None)
    assert list((tmp_path / "data").glob("manifest-*")) == []


def test_command_refuses_bad_data_naming_the_field_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, out = _config(tmp_path), tmp_path / "out"
    bad = _write(
        tmp_path / "bad.json",
        [
            {
                "prompt_id": "p",
                "prompt": "q",
                "candidates": [_candidate("a", rank=1), _candidate("b")],
            }
        ],
    )
    assert main(["bootstrap", "--data", str(bad), "--out", str(out), "--config", str(config)]) == 2
    assert "prompts[0].candidates[1].metadata.rank" in capsys.readouterr().err
    assert not out.exists()
    settings = load_settings(config)
    qdrant = open_qdrant(settings.memory)
    try:
        assert RubricStore(qdrant, settings.memory.collection, None).history() == []
    finally:
        qdrant.close()


async def test_a_response_the_judge_cannot_take_is_left_out_and_listed(tmp_path: Path) -> None:
    settings = load_settings(None, **{"scoring.max_field_chars": 200})
    long = {"candidate_id": "long", "text": "x" * 300, "metadata": {"rank": 3}}
    data = _write(
        tmp_path / "long.json",
        [
            {
                "prompt_id": "p",
                "prompt": "What is 2 + 2?",
                "reference": "4",
                "candidates": [
                    {"candidate_id": "a", "text": "2 + 2 = 4. Answer: 4", "metadata": {"rank": 1}},
                    {"candidate_id": "b", "text": "Answer: 5", "metadata": {"rank": 2}},
                    long,
                ],
            }
        ],
    )
    dataset, pairs = load_dataset(data)
    gateway = LLMGateway(settings, build_providers(settings), CallLog(None))
    qdrant = open_qdrant(settings.memory, location=":memory:")
    try:
        scorer = Scorer(
            settings.scoring, gateway, RubricStore(qdrant, "t", None), _scorer_prompt(settings)
        )
        result = await bootstrap(settings, dataset, pairs, gateway, scorer, Options(generations=2))
    finally:
        await gateway.close()
        qdrant.close()
    assert [u.split(":")[0] for u in result.unscored] == ["p/long"]
    # only the pair of the two judged responses counts
    assert result.accuracy["initial"]["all"].pairs == 1
