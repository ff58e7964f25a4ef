"""``AmarisRewardManager`` (``amaris.integrations.verl_manager``) on verl's own classes: the
prompt it adds from ``raw_prompt`` and the configurations under which verl would pad, which
it refuses. Needs no fixture of tests/conftest.py (mutation testing runs it with
``--noconftest``: bench/evaluations/mutation.py ``verl_manager``); the trainer-contract
files run it in verl's reward loop against a real amaris."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from tests.support.trainer_env import byte_tokenizer, install_trainers, stub_gpu_modules

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]


@pytest.fixture(scope="module")
def manager() -> Any:
    """amaris.integrations.verl_manager, once verl is installed (imported at first use, not
    at collection: the quick loop collects this file too)."""
    install_trainers()
    stub_gpu_modules()
    return importlib.import_module("amaris.integrations.verl_manager")


CHAT = [{"role": "user", "content": "6 * 7?"}]
REMAX = "remax"
"""The literal: one interned object, the same as verl_manager's own."""


def config(
    enable: bool = True,
    pool: bool = False,
    workers: int = 8,
    prompts: int = 4,
    gen: int | None = None,
    n: int = 2,
    agents: int = 8,
    estimator: str = "grpo",
) -> Any:
    return OmegaConf.create(
        {
            "reward": {
                "num_workers": workers,
                "reward_model": {"enable": enable, "enable_resource_pool": pool},
            },
            "data": {"train_batch_size": prompts, "gen_batch_size": gen},
            "actor_rollout_ref": {"rollout": {"n": n, "agent": {"num_workers": agents}}},
            "algorithm": {"adv_estimator": estimator},
        }
    )


def test_no_padding_without_a_colocated_reward_model_or_with_whole_chunks(manager: Any) -> None:
    assert manager.padding_problems(config(enable=False, workers=3)) == []
    assert manager.padding_problems(config(pool=True, workers=3)) == []
    assert manager.padding_problems(config()) == []  # 4 x 2 = 8 samples, 8 agent workers
    assert manager.padding_problems(config(workers=1, prompts=3, n=1, agents=5)) == []
    assert manager.padding_problems(config(workers=4, prompts=6, n=2, agents=4)) == []


def test_each_size_verl_would_pad_is_named(manager: Any) -> None:
    (training,) = manager.padding_problems(config(prompts=3, n=1))
    assert training == (
        "reward.num_workers=8 does not divide the training batch "
        "(data.train_batch_size x actor_rollout_ref.rollout.n)=3"
    )
    (validation,) = manager.padding_problems(config(workers=4, prompts=4, agents=6))
    assert validation.startswith("reward.num_workers=4 does not divide actor_rollout_ref")
    assert validation.endswith("(validation batches are padded to it)=6")
    # gen_batch_size, when set, is the number of prompts a step generates for
    (generated,) = manager.padding_problems(config(prompts=8, gen=3, n=1))
    assert generated.endswith("=3")
    assert manager.padding_problems(config(prompts=3, gen=8, n=1)) == []


def test_remax_baselines_are_one_per_prompt(manager: Any) -> None:
    remax = config(workers=4, prompts=6, n=2, agents=4, estimator="remax")
    (baselines,) = manager.padding_problems(remax)
    assert (
        baselines
        == "reward.num_workers=4 does not divide the REMAX baselines (data.train_batch_size)=6"
    )
    assert (
        manager.padding_problems(config(workers=4, prompts=8, n=1, agents=4, estimator="remax"))
        == []
    )
    # the estimator as hydra reads it from YAML: a string built at run time, equal to the
    # literal but not the same object
    read = OmegaConf.merge(remax, OmegaConf.create("algorithm: {adv_estimator: remax}"))
    assert read.algorithm.adv_estimator is not REMAX
    assert manager.padding_problems(read) == [baselines]
    # only REMAX scores baselines: not an estimator sorting after it (rloo) or before (grpo)
    for other in ("rloo", "reinforce_plus_plus", "grpo"):
        assert (
            manager.padding_problems(config(workers=4, prompts=6, n=2, agents=4, estimator=other))
            == []
        )


def test_the_manager_refuses_a_padding_configuration_and_starts_otherwise(manager: Any) -> None:
    with pytest.raises(ValueError, match=r"=3: with a colocated reward model.*reward\.num_workers"):
        manager.AmarisRewardManager(config(prompts=3, n=1), byte_tokenizer(), None)
    with pytest.raises(ValueError, match=r"=3; reward\.num_workers=8 does not divide actor"):
        manager.AmarisRewardManager(config(prompts=3, n=1, agents=4), byte_tokenizer(), None)
    started = manager.AmarisRewardManager(
        config(enable=False), byte_tokenizer(), None, reward_router_address="127.0.0.1:9"
    )
    assert started.reward_router_address == "127.0.0.1:9"


def sample(extra: Any, raw: list[dict[str, str]] | None = CHAT, size: int = 2) -> Any:
    tok = byte_tokenizer()
    ids = tok("The answer is 42.")["input_ids"]
    non_tensors: dict[str, Any] = {
        "data_source": np.array(["ds"] * size, dtype=object),
        "reward_model": np.array([{"ground_truth": "42"}] * size, dtype=object),
        "extra_info": np.array([extra] * size, dtype=object),
    }
    if raw is not None:
        prompts = np.empty(size, dtype=object)
        prompts[:] = [raw] * size
        non_tensors["raw_prompt"] = prompts
    return importlib.import_module("verl.protocol").DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([[1, 2]] * size),
            "responses": torch.tensor([ids] * size),
            "attention_mask": torch.ones(size, 2 + len(ids), dtype=torch.long),
        },
        non_tensors=non_tensors,
    )


def test_with_prompt_takes_raw_prompt_only_when_extra_info_has_none(manager: Any) -> None:
    data = sample({"index": 1})
    last = manager.with_prompt(data)
    assert len(last) == 1
    assert last.non_tensor_batch["extra_info"][0] == {"index": 1, "prompt": CHAT}
    assert data.non_tensor_batch["extra_info"][1] == {"index": 1}  # left as it was
    for kept in ({"prompt": "P"}, {"question": "Q"}):
        assert manager.with_prompt(sample(kept)).non_tensor_batch["extra_info"][0] == kept
    assert manager.with_prompt(sample({"prompt": ""})).non_tensor_batch["extra_info"][0] == {
        "prompt": CHAT
    }
    assert manager.with_prompt(sample(None)).non_tensor_batch["extra_info"][0] == {"prompt": CHAT}
    assert manager.with_prompt(sample({"index": 2}, raw=None)).non_tensor_batch["extra_info"][
        0
    ] == {"index": 2}


def test_with_prompt_of_a_batch_takes_its_last_sample_only(manager: Any) -> None:
    data = sample({"index": 0}, size=3)
    data.non_tensor_batch["extra_info"][:] = [{"index": i} for i in range(3)]
    last = manager.with_prompt(data)
    assert len(last) == 1
    assert last.non_tensor_batch["extra_info"][0] == {"index": 2, "prompt": CHAT}


def test_run_single_scores_the_last_sample_with_its_prompt(manager: Any) -> None:
    seen: list[dict[str, Any]] = []

    def score(**kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs)
        return {"score": 1.0, "status": "scored"}

    scorer = manager.AmarisRewardManager(config(enable=False), byte_tokenizer(), score)
    result = scorer.loop.run_until_complete(scorer.run_single(sample({"index": 3})))
    assert result == {"reward_score": 1.0, "reward_extra_info": {"score": 1.0, "status": "scored"}}
    (call,) = seen
    assert call["extra_info"]["prompt"] == CHAT
    assert call["solution_str"] == "The answer is 42." and call["ground_truth"] == "42"


def test_with_prompt_hands_a_batch_scored_episode_to_the_reward_function(manager: Any) -> None:
    # with a colocated reward model verl scores the step's batch, which holds each agent
    # loop's "extras" column but hands the reward function only the dataset's extra_info
    episode = {"messages": [*CHAT, {"role": "assistant", "content": "42"}], "finish_reason": "stop"}
    data = sample({"index": 1})
    column = np.empty(2, dtype=object)
    column[:] = [None, episode]
    data.non_tensor_batch["extras"] = column
    assert manager.with_prompt(data).non_tensor_batch["extra_info"][0] == {
        "index": 1,
        "prompt": CHAT,
        "extras": episode,
    }
    # a single-turn sample (verl's loop records none), or extras the sample already has
    column[:] = [episode, None]
    assert "extras" not in manager.with_prompt(data).non_tensor_batch["extra_info"][0]
    column[:] = [None, episode]
    own = sample({"index": 1, "extras": {"messages": CHAT}})
    own.non_tensor_batch["extras"] = column
    assert manager.with_prompt(own).non_tensor_batch["extra_info"][0]["extras"] == {
        "messages": CHAT
    }
