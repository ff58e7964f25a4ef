"""verl 0.9.1's own code scoring with amaris: config composition -> reward loop -> batch.

verl's ``ppo_trainer.yaml`` composed by Hydra with the overrides docs/integrations.md
gives, ``get_custom_reward_fn`` loading the adapter from that config, verl's
``RewardLoopWorker`` running the configured manager (naive, dapo, rate_limited, or
amaris's own :class:`AmarisRewardManager`) over a ``DataProto`` batch, and
``RewardLoopManager.compute_rm_score`` assembling the step's ``rm_scores`` and extra
infos. Only ray is replaced (in process; tests/support/trainer_env.py).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import amaris.integrations.verl as adapter
from amaris.client import RewardUnavailableError
from tests.support.fake_llm import FakeLLM
from tests.support.trainer_env import RayInitCalled, byte_tokenizer
from tests.support.verl_env import DOWN, RewardWorker, compose_config, compute_rm_score, documented

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

MANAGERS = ("naive", "dapo", "rate_limited", "amaris")
QUESTION = "What is 6 * 7?"
ANSWERS = ["The answer is 42.", "The answer is 41.", "6 * 7 = 42.", "It is 7."]


def batch(verl: SimpleNamespace, responses: list[str], with_question: bool) -> Any:
    """A rollout batch as verl's trainer hands it to the reward loop (right-padded)."""
    tok = byte_tokenizer()
    prompt_ids = tok(QUESTION)["input_ids"]
    encoded = [tok(r)["input_ids"] + [tok.eos_token_id] for r in responses]
    width = max(len(e) for e in encoded)
    responses_t = torch.tensor([e + [tok.pad_token_id] * (width - len(e)) for e in encoded])
    mask = torch.tensor(
        [[1] * len(prompt_ids) + [1] * len(e) + [0] * (width - len(e)) for e in encoded]
    )
    size = len(responses)
    extra = [{"split": "train", "index": i // 2} for i in range(size)]
    if with_question:
        extra = [{**e, "question": QUESTION} for e in extra]
    raw = np.empty(size, dtype=object)
    raw[:] = [[{"role": "user", "content": QUESTION}] for _ in range(size)]
    return verl.protocol.DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt_ids] * size),
            "responses": responses_t,
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": np.array(["openai/gsm8k"] * size, dtype=object),
            "reward_model": np.array([{"ground_truth": "42"}] * size, dtype=object),
            "extra_info": np.array(extra, dtype=object),
            "raw_prompt": raw,
        },
    )


def training_step(verl: SimpleNamespace, config: Any, data: Any) -> Any:
    """verl's own ``RewardLoopManager.compute_rm_score`` over one worker."""
    return compute_rm_score(verl, config, [RewardWorker(verl, config)], data)


def rewards_of(out: Any) -> list[float]:
    """The reward of each sample: rm_scores at its last valid response token."""
    return [float(row.sum()) for row in out.batch["rm_scores"]]


def old_form(model: str, url: str) -> list[str]:
    """verl < 0.9's top-level ``custom_reward_function.*``, and what ``main_ppo``'s config
    checks need on a CPU (micro-batches, no critic)."""
    return [
        f"custom_reward_function.path={adapter.__file__}",
        "custom_reward_function.name=compute_score_async",
        f"+custom_reward_function.reward_kwargs.url={url}",
        "+custom_reward_function.reward_kwargs.retry_seconds=0",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.train_batch_size=4",
        "trainer.n_gpus_per_node=1",
        "algorithm.adv_estimator=grpo",
    ]


def start(entry_point: Any, config: Any) -> None:
    """Run a verl entry point's ``main`` on ``config`` up to ``ray.init`` (training)."""
    with pytest.raises(RayInitCalled):
        entry_point.main(config)


def test_main_ppo_ignores_the_old_top_level_form(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM]
) -> None:
    # composed without error and passed every check up to ray.init, but get_custom_reward_fn
    # never sees it: verl falls back to its rule scorer, amaris would never be called
    url, _, _ = verl_amaris
    config = compose_config(verl.config_dir, old_form(verl_model, url))
    start(importlib.import_module("verl.trainer.main_ppo"), config)
    assert verl.version == "0.9.1"
    assert verl.reward.get_custom_reward_fn(config) is None


def test_the_fully_async_entry_point_migrates_the_old_form_and_scores(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM]
) -> None:
    url, services, _ = verl_amaris
    config = compose_config(
        verl.async_config_dir, old_form(verl_model, url), name="fully_async_ppo_trainer"
    )
    assert verl.reward.get_custom_reward_fn(config) is None  # as composed
    # fully_async_main.main moves the old form into reward.* (migrate_legacy_reward_impl)
    start(importlib.import_module("verl.experimental.fully_async_policy.fully_async_main"), config)
    assert config.reward.custom_reward_function.path == adapter.__file__
    assert "custom_reward_function" not in config
    out = training_step(verl, config, batch(verl, ANSWERS[:2], with_question=True))
    assert rewards_of(out) == [1.0, 0.0]
    assert sorted(r.rollout.output for r in services.rollouts.load_step(0)) == sorted(ANSWERS[:2])


def reward_model(model: str, *more: str) -> list[str]:
    """A colocated (generative) reward model beside the custom function: verl then scores
    whole batches in ``compute_rm_score``; the router is where the model would answer."""
    return [
        "reward.reward_model.enable=True",
        f"reward.reward_model.model_path={model}",
        "reward.reward_model.rollout.name=vllm",
        *more,
    ]


ROUTER = "127.0.0.1:9"


def test_a_reward_model_batch_verl_would_pad_is_refused_before_anything_is_logged(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM]
) -> None:
    # 3 samples, verl's default 8 reward workers: compute_rm_score pads the batch to 8 with
    # copies of samples 0, 1, 2, 0, 1 sent to workers 3-7, each a rollout to amaris
    url, services, _ = verl_amaris
    more = reward_model(verl_model, "data.train_batch_size=3")
    config = compose_config(verl.config_dir, documented("amaris", url, verl_model, *more))
    assert config.reward.num_workers == 8
    with pytest.raises(
        ValueError, match=r"reward\.num_workers=8 does not divide the training batch"
    ):
        workers = [RewardWorker(verl, config, ROUTER) for _ in range(config.reward.num_workers)]
        compute_rm_score(verl, config, workers, batch(verl, ANSWERS[:3], with_question=False))
    assert services.rollouts.load_step(0) == []


def test_a_reward_model_batch_of_whole_chunks_logs_one_record_per_sample(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM]
) -> None:
    url, services, _ = verl_amaris
    more = reward_model(verl_model, "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2")
    config = compose_config(verl.config_dir, documented("amaris", url, verl_model, *more))
    # verl's defaults: 8 reward workers, one sample each; the router address reaches the
    # reward function as reward_router_address / reward_model_tokenizer, which it ignores
    workers = [RewardWorker(verl, config, ROUTER) for _ in range(config.reward.num_workers)]
    out = compute_rm_score(verl, config, workers, batch(verl, ANSWERS * 2, with_question=False))
    assert rewards_of(out) == [1.0, 0.0, 1.0, 0.0] * 2
    assert list(out.non_tensor_batch["status"]) == ["scored"] * 8
    records = services.rollouts.load_step(0)
    assert sorted(r.rollout.output for r in records) == sorted(ANSWERS * 2)


@pytest.mark.parametrize("manager", MANAGERS)
def test_every_manager_scores_a_step_through_amaris(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM], manager: str
) -> None:
    url, services, _ = verl_amaris
    config = compose_config(verl.config_dir, documented(manager, url, verl_model))
    assert verl.reward.get_custom_reward_fn(config) is not None
    # verl's own datasets put no prompt in extra_info: amaris's manager takes raw_prompt
    out = training_step(verl, config, batch(verl, ANSWERS, with_question=manager != "amaris"))
    assert rewards_of(out) == [1.0, 0.0, 1.0, 0.0]
    infos = {key: list(out.non_tensor_batch[key]) for key in out.meta_info["reward_extra_keys"]}
    assert infos["status"] == ["scored"] * 4
    assert infos["unscored"] == [0.0] * 4
    # the step reached amaris: logged under the step it has open, prompt and group kept
    records = services.rollouts.load_step(0)
    assert sorted(r.rollout.output for r in records) == sorted(ANSWERS)
    expected_input = f"user: {QUESTION}" if manager == "amaris" else QUESTION
    assert {r.rollout.input for r in records} == {expected_input}
    assert {r.rollout.group_id for r in records} == {"openai/gsm8k/0", "openai/gsm8k/1"}


@pytest.mark.parametrize("manager", ["naive", "dapo", "amaris"])
def test_judge_outage_fails_the_step_by_default(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM], manager: str
) -> None:
    url, _, _ = verl_amaris
    config = compose_config(verl.config_dir, documented(manager, url, verl_model))
    data = batch(verl, [ANSWERS[0], ANSWERS[1] + DOWN], with_question=True)
    with pytest.raises(RewardUnavailableError, match=r"sample 0: judge_unavailable"):
        training_step(verl, config, data)


def test_judge_outage_under_rate_limited_is_verls_zero_by_default(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM]
) -> None:
    url, _, _ = verl_amaris
    config = compose_config(verl.config_dir, documented("rate_limited", url, verl_model))
    # rate_limited catches the adapter's error and makes the reward 0.0 itself
    down = training_step(verl, config, batch(verl, [a + DOWN for a in ANSWERS[:2]], True))
    assert rewards_of(down) == [0.0, 0.0]
    assert all("judge_unavailable" in e for e in down.non_tensor_batch["error"])
    # a batch mixing that with amaris's rewards cannot be assembled: the step fails
    with pytest.raises(KeyError):
        training_step(verl, config, batch(verl, [ANSWERS[0], ANSWERS[1] + DOWN], True))


@pytest.mark.parametrize("manager", MANAGERS)
def test_unscored_score_keeps_the_step_with_the_same_keys(
    verl: SimpleNamespace, verl_model: str, verl_amaris: tuple[str, Any, FakeLLM], manager: str
) -> None:
    url, _, _ = verl_amaris
    more = "+reward.custom_reward_function.reward_kwargs.unscored_score=0.5"
    config = compose_config(verl.config_dir, documented(manager, url, verl_model, more))
    out = training_step(verl, config, batch(verl, [ANSWERS[0], ANSWERS[1] + DOWN], True))
    assert rewards_of(out) == [1.0, 0.5]
    assert list(out.non_tensor_batch["status"]) == ["scored", "unscored"]
    assert list(out.non_tensor_batch["unscored"]) == [0.0, 1.0]
    reasons = list(out.non_tensor_batch["reason"])
    assert reasons[0] == "" and "judge_unavailable" in reasons[1]
