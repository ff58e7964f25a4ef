"""OpenRLHF 0.11.2's own code scoring with amaris: argument parser -> rollout -> experience.

``python -m openrlhf.cli.train_ppo_ray`` runs with the flags docs/integrations.md gives
(its parser and checks, up to ``ray.init``, where training would start); its dataset
helper takes the label by ``--data.label_key``; its rollout actor's
``generate_responses`` runs the ``SingleTurnAgentExecutor`` the parsed
``--reward.remote_url`` configures (prompt truncation, query decoding, the remote-reward
call: amaris's ``reward_func`` file or its ``/get_reward`` URL); its samples generator
turns each answer into an ``Experience``, and its experience maker batches them
(``concat_experiences``) and checks they have rewards. Only the vLLM generation is
replaced (a scripted engine), and ray (in process; tests/support/trainer_env.py). The
tokenizer is a byte-level one whose decode gives every text back, or a real WordPiece
tokenizer whose decode does not (lower-cased, punctuation spaced out).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.trainer_env import (
    RayInitCalled,
    byte_tokenizer,
    install_trainers,
    stub_gpu_modules,
    wordpiece_tokenizer,
)

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

REWARD_FILE = Path(__file__).resolve().parents[2] / "examples/openrlhf/reward_func.py"
QUESTION = "What is 6 * 7? Answer with the number."
DOWN = "(judge down)"  # a response holding this gets a 500 from the judge


@pytest.fixture(scope="module")
def openrlhf() -> SimpleNamespace:
    """OpenRLHF's modules, imported once the pinned package is on sys.path."""
    install_trainers()
    stub_gpu_modules()
    return SimpleNamespace(
        version=importlib.metadata.version("openrlhf"),
        agent=importlib.import_module("openrlhf.utils.agent"),
        engine=importlib.import_module("openrlhf.trainer.ray.vllm_engine"),
        samples=importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator"),
        maker=importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker"),
        dataset=importlib.import_module("openrlhf.datasets.prompts_dataset"),
    )


@pytest.fixture
def openrlhf_log(
    openrlhf: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> Iterator[pytest.LogCaptureFixture]:
    """caplog holding OpenRLHF's own log lines. Its loggers do not propagate (they print to
    stdout through their own handler); pytest 9.2 hooks caplog onto such loggers, 9.0.3
    does not, so the handler is attached here on every pytest version."""
    logger = openrlhf.agent.logger
    logger.addHandler(caplog.handler)
    caplog.set_level("INFO")
    yield caplog
    logger.removeHandler(caplog.handler)


def parse(monkeypatch: pytest.MonkeyPatch, flags: list[str]) -> Any:
    """The ``args`` OpenRLHF's ``train_ppo_ray`` hands to ``train`` for these flags."""
    monkeypatch.setattr(sys, "argv", ["train_ppo_ray", *flags])
    with pytest.raises(RayInitCalled) as started:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    frame = started.tb
    while frame is not None and frame.tb_frame.f_code.co_name != "train":
        frame = frame.tb_next
    assert frame is not None, "training did not start from train(args)"
    return frame.tb_frame.f_locals["args"]


def documented(remote_url: str) -> list[str]:
    """The flags of docs/integrations.md (examples/openrlhf/config.sh)."""
    return [
        "--actor.model_name_or_path", "tiny",
        "--actor.num_gpus_per_node", "1",
        "--reward.remote_url", remote_url,
        "--data.input_key", "question",
        "--data.label_key", "answer",
        "--rollout.batch_size", "2",
        "--rollout.n_samples_per_prompt", "2",
        "--rollout.micro_batch_size", "2",
        "--algo.advantage.estimator", "group_norm",
    ]  # fmt: skip


class ScriptedVLLM:
    """The GPU boundary: vLLM's generate, answering scripted responses in order, on the
    real ``RolloutRayActor.generate_responses`` with the executor OpenRLHF configures."""

    def __init__(self, executor: Any, responses: list[str], tokenizer: Any) -> None:
        self.executor = executor
        self.tokenizer = tokenizer
        self.responses = list(responses)

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, **_: Any) -> Any:
        ids = self.tokenizer(self.responses.pop(0), add_special_tokens=False)["input_ids"]
        output = SimpleNamespace(token_ids=ids, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def rollout(
    openrlhf: SimpleNamespace,
    args: Any,
    responses: list[str],
    max_length: int = 2048,
    tokenizer: Any = None,
) -> list[Any]:
    """One prompt of the dataset, its responses scored and made into experiences (with
    ``tokenizer``, default the byte-level one)."""
    prompt, label = openrlhf.dataset.preprocess_data(
        {"question": QUESTION, "answer": "42"},
        input_key=args.data.input_key,
        label_key=args.data.label_key,
    )
    executor = openrlhf.agent.SingleTurnAgentExecutor(args.reward.remote_url)
    engine = ScriptedVLLM(executor, responses, tokenizer or byte_tokenizer())
    params = SimpleNamespace(max_tokens=32, logprobs=None)
    answers = asyncio.run(
        openrlhf.engine.RolloutRayActor.generate_responses(
            engine,
            prompt=prompt,
            label=label,
            sampling_params=params,
            max_length=max_length,
            hf_tokenizer=engine.tokenizer,
            num_samples=len(responses),
        )
    )
    generator = openrlhf.samples.SamplesGenerator
    return [
        generator._process_response_into_experience(None, a, max_len=max_length) for a in answers
    ]


def experience_maker(openrlhf: SimpleNamespace, args: Any) -> Any:
    """OpenRLHF's experience maker for remote rewards (no reward model group)."""
    return openrlhf.maker.RemoteExperienceMaker(
        None, None, None, None, None, SimpleNamespace(args=args), byte_tokenizer()
    )


@pytest.fixture
def amaris(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[Any]:
    """A factory: amaris on uvicorn judging through the fake LLM (DOWN responses fail)."""

    def judge(body: dict[str, Any]) -> Reply:
        return Reply(status=500) if DOWN in json.dumps(body) else offline_reply(body)

    fake_llm.default = judge
    stack: list[Any] = []

    def start(**overrides: Any) -> tuple[str, Any]:
        settings = llm_settings(
            tmp_path,
            fake_llm,
            **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0, **overrides},
        )
        app = in_memory_app(settings)
        serving = serve_in_thread(app)
        url = serving.__enter__()
        stack.append(serving)
        return url, app.state.services

    yield start
    for serving in reversed(stack):
        serving.__exit__(None, None, None)


def test_documented_flags_parse_and_reach_amaris(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    args = parse(monkeypatch, documented(str(REWARD_FILE)))
    assert openrlhf.version == "0.11.2"
    assert args.reward.remote_url == [str(REWARD_FILE)]
    assert args.data.label_key == "answer"
    samples = rollout(openrlhf, args, ["The answer is 42.", "The answer is 41."])
    batch = experience_maker(openrlhf, args).split_rollout_samples(samples)
    assert len(batch) == 1
    assert batch[0].rewards.flatten().tolist() == [1.0, 0.0]
    assert batch[0].info["amaris_unscored"].flatten().tolist() == [0.0, 0.0]
    assert batch[0].info["amaris_rubric_version"].flatten().tolist() == [1.0, 1.0]
    records = services.rollouts.load_step(0)
    assert sorted(r.rollout.output for r in records) == sorted(
        ["The answer is 42.", "The answer is 41."]
    )
    assert {r.rollout.supplemental_context for r in records} == {"42"}


def test_the_old_flags_are_refused_by_the_parser(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        sys, "argv", ["train_ppo_ray", "--remote_rm_url", str(REWARD_FILE), "--label_key", "answer"]
    )
    with pytest.raises(SystemExit):
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    assert "unrecognized arguments: --remote_rm_url" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["file", "url"])
def test_a_truncated_prompt_is_scored(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any, form: str
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    remote = str(REWARD_FILE) if form == "file" else f"{url}/get_reward"
    args = parse(monkeypatch, documented(remote))
    # max_length 52 with 32 new tokens: OpenRLHF keeps the prompt's last 20 bytes
    samples = rollout(openrlhf, args, ["The answer is 42."], max_length=52)
    assert samples[0].rewards.flatten().tolist() == [1.0]
    (record,) = services.rollouts.load_step(0)
    assert record.rollout.input == QUESTION  # the whole prompt, as the dataset has it
    assert record.rollout.output == "The answer is 42."


@pytest.fixture(scope="module")
def wordpiece() -> Any:
    """The module's WordPiece tokenizer (loaded once)."""
    return wordpiece_tokenizer()


@pytest.mark.parametrize("form", ["file", "url"])
@pytest.mark.parametrize("max_length", [2048, 38], ids=["whole", "cut"])
def test_a_subword_tokenizers_decode_is_split_at_the_prompt(
    openrlhf: SimpleNamespace,
    monkeypatch: pytest.MonkeyPatch,
    amaris: Any,
    wordpiece: Any,
    form: str,
    max_length: int,
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    remote = str(REWARD_FILE) if form == "file" else f"{url}/get_reward"
    args = parse(monkeypatch, documented(remote))
    responses = ["The answer is 42.", "The answer is 41."]
    ids = wordpiece(QUESTION, add_special_tokens=False)["input_ids"]
    if max_length < 2048:  # 32 new tokens: OpenRLHF keeps the prompt's last 6 tokens
        assert len(ids) > max_length - 32
        ids = ids[-(max_length - 32) :]
    answer = wordpiece(responses[0], add_special_tokens=False)["input_ids"]
    query = wordpiece.decode(ids + answer, skip_special_tokens=False)
    # what OpenRLHF posts as the query: neither the prompt nor its tail as the dataset has it
    assert (
        query
        == {
            2048: "what is 6 * 7? answer with the number. the answer is 42.",
            38: "? answer with the number. the answer is 42.",
        }[max_length]
    )
    samples = rollout(openrlhf, args, responses, max_length=max_length, tokenizer=wordpiece)
    assert [s.rewards.flatten().tolist() for s in samples] == [[1.0], [0.0]]
    records = services.rollouts.load_step(0)
    assert {r.rollout.input for r in records} == {QUESTION}  # the whole prompt
    # the responses as the tokenizer decoded them, without the prompt's text
    assert sorted(r.rollout.output for r in records) == ["the answer is 41.", "the answer is 42."]


@pytest.mark.parametrize("form", ["file", "url"])
def test_judge_outage_fails_the_step_naming_amaris_reason(
    openrlhf: SimpleNamespace,
    monkeypatch: pytest.MonkeyPatch,
    amaris: Any,
    openrlhf_log: pytest.LogCaptureFixture,
    form: str,
) -> None:
    url, _ = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    monkeypatch.setenv("AMARIS_RETRY_SECONDS", "0")
    remote = str(REWARD_FILE) if form == "file" else f"{url}/get_reward"
    args = parse(monkeypatch, documented(remote))
    samples = rollout(openrlhf, args, ["The answer is 42." + DOWN, "The answer is 41." + DOWN])
    assert [s.rewards for s in samples] == [None, None]
    logged = openrlhf_log.text
    if form == "file":  # OpenRLHF logs the adapter's error: amaris's reason
        assert "Failed to fetch reward from remote RM: 1 of 1 samples unscored" in logged
        assert "judge_unavailable" in logged
    else:  # OpenRLHF logs the status only (the 503 body names the reason)
        assert "503" in logged
    maker = experience_maker(openrlhf, args)
    with pytest.raises(ValueError, match="reward_model_group is required"):
        maker.make_experience(maker.split_rollout_samples(samples))


@pytest.mark.parametrize("form", ["file", "url"])
def test_neutral_policy_keeps_the_step_flagged(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any, form: str
) -> None:
    url, _ = amaris(**{"scoring.on_failure": "neutral", "scoring.neutral_score": 0.5})
    monkeypatch.setenv("AMARIS_URL", url)
    remote = str(REWARD_FILE) if form == "file" else f"{url}/get_reward"
    args = parse(monkeypatch, documented(remote))
    samples = rollout(openrlhf, args, ["The answer is 42.", "The answer is 41." + DOWN])
    batch = experience_maker(openrlhf, args).split_rollout_samples(samples)
    assert batch[0].rewards.flatten().tolist() == [1.0, 0.5]
    assert batch[0].info["amaris_unscored"].flatten().tolist() == [0.0, 1.0]
    assert torch.equal(batch[0].scores.flatten(), batch[0].rewards.flatten())
