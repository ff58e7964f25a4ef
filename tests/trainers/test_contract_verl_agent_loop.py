"""verl 0.9.1 scoring with amaris the way a run without a reward model does: in the agent loop.

With a custom reward function and no reward model (how amaris is used), verl rewards each
sample as its agent loop ends: ``AgentLoopWorker._compute_score`` builds a one-sample
``DataProto`` from the dataset row's fields, the loop's extra fields (tool turns) and
``__num_turns__``, and awaits ``compute_score`` on a random one of the
``reward.num_workers`` reward workers; ``_postprocess`` puts the rewards in ``rm_scores``
and the extra infos in the batch, where the trainer's ``extract_reward`` reads them. Here
every piece of that is verl's own code (tests/support/verl_env.py): the rows come from a
parquet file through ``RLHFDataset``, the rollouts from verl's single-turn and tool agent
loops (the tool is a verl function tool), generation from a scripted LLM server.

Also: verl's reward-model path (``compute_rm_score``), where verl pads batches, and the
fully-async entry point, which migrates the old top-level ``custom_reward_function``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.support.fake_llm import FakeLLM
from tests.support.verl_env import (
    AGENT_LOOP,
    DOWN,
    RewardWorker,
    ScriptedServer,
    agent_loop_step,
    compose_config,
    dataset,
    documented,
    tool_call,
)

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

QUESTION = "What is 6 * 7?"
TOOL_QUESTION = "What is 6 * 7? Use the calculator."


def said(text: str) -> Callable[[str], str]:
    """A single-turn policy: ``text``."""
    return lambda conversation: text


def calculator_then(text: str) -> Callable[[str], str]:
    """A tool-using policy: a call of ``multiply(6, 7)``, then (once the tool answered) ``text``."""
    return lambda conversation: (
        text if "tool: " in conversation else tool_call("multiply", a=6, b=7)
    )


# the question a conversation starts with -> the scripts of its samples (rollout.n = 2);
# TOOL_QUESTION holds QUESTION: it comes first
SCRIPTS = {
    TOOL_QUESTION: [calculator_then("So 6 * 7 = 42."), calculator_then("So it is 7.")],
    QUESTION: [said("The answer is 42."), said("The answer is 41.")],
}


def rows(with_question: bool) -> list[dict[str, Any]]:
    """Two gsm8k-style rows as verl's preprocessing writes them; the second for the tool loop."""

    def row(index: int, question: str, agent: str) -> dict[str, Any]:
        extra: dict[str, Any] = {"split": "train", "index": index}
        if with_question:
            extra["question"] = question
        return {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "42"},
            "extra_info": extra,
            "agent_name": agent,
        }

    return [row(0, QUESTION, "single_turn_agent"), row(1, TOOL_QUESTION, "tool_agent")]


def step_config(verl: SimpleNamespace, manager: str, url: str, model: str, *more: str) -> Any:
    """The documented overrides, a step of 2 prompts x 2 samples on 2 agent workers, verl's
    own default ``reward.num_workers``."""
    overrides = documented(
        manager,
        url,
        model,
        *AGENT_LOOP,
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={Path(model) / 'tools.py'}",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        "data.train_batch_size=2",
        *more,
    )
    return compose_config(verl.config_dir, overrides)


@pytest.mark.parametrize("manager", ["amaris", "naive"])
def test_the_agent_loop_rewards_each_sample_once_through_amaris(
    verl: SimpleNamespace,
    verl_model: str,
    verl_amaris: tuple[str, Any, FakeLLM],
    tmp_path: Path,
    manager: str,
) -> None:
    url, services, _ = verl_amaris
    config = step_config(verl, manager, url, verl_model)
    assert config.reward.num_workers == 8  # verl's default
    assert not config.reward.reward_model.enable
    workers = [RewardWorker(verl, config) for _ in range(config.reward.num_workers)]
    server = ScriptedServer(verl, SCRIPTS)
    # verl's own datasets put no prompt in extra_info: amaris's manager takes raw_prompt
    batch = dataset(verl, config, tmp_path, rows(with_question=manager != "amaris"))

    out, reward_tensor, infos = agent_loop_step(verl, config, batch, server, workers, step=1)

    # 4 conversations, one generation per turn: the tool samples took two
    assert sorted(Counter(server.turns).values()) == [1, 1, 2, 2]
    assert list(out.non_tensor_batch["__num_turns__"]) == [2, 2, 4, 4]
    responses = [
        server.tokenizer.decode(r, skip_special_tokens=True) for r in out.batch["responses"]
    ]
    assert sorted(responses[:2]) == ["The answer is 41.", "The answer is 42."]
    assert all(r.startswith("<tool_call>") and "tool: 42\n" in r for r in responses[2:])
    # exactly one record per sample, and the reward verl trains on is the one amaris logged
    records = services.rollouts.load_step(0)
    assert sorted(r.rollout.output for r in records) == sorted(responses)
    logged = {r.rollout.output: r.score for r in records}
    rewards = reward_tensor.sum(dim=-1).tolist()
    assert rewards == [logged[r] for r in responses]
    assert {r: logged[r] for r in responses[:2]} == {
        "The answer is 42.": 1.0,
        "The answer is 41.": 0.0,
    }
    by_answer = {r.rsplit("assistant: ", 1)[1]: logged[r] for r in responses[2:]}
    assert by_answer == {"So 6 * 7 = 42.": 1.0, "So it is 7.": 0.0}
    # each reward sits on its sample's last response token (``_postprocess``)
    last = out.batch["attention_mask"][:, out.batch["prompts"].size(1) :].sum(dim=1) - 1
    assert torch.equal(
        reward_tensor.argmax(dim=-1)[torch.tensor(rewards) > 0], last[torch.tensor(rewards) > 0]
    )
    # the extra infos verl logs beside the reward
    assert out.meta_info["reward_extra_keys"] == [
        "score",
        "rubric_version",
        "status",
        "reason",
        "unscored",
    ]
    assert list(infos["score"]) == rewards
    assert list(infos["status"]) == ["scored"] * 4
    assert list(infos["unscored"]) == [0.0] * 4
    assert list(infos["reason"]) == [""] * 4
    assert list(infos["rubric_version"]) == [1] * 4
    # prompt and group as the dataset row has them
    inputs = {r.rollout.group_id: r.rollout.input for r in records}
    if manager == "amaris":
        assert inputs == {
            "openai/gsm8k/0": f"user: {QUESTION}",
            "openai/gsm8k/1": f"user: {TOOL_QUESTION}",
        }
    else:
        assert inputs == {"openai/gsm8k/0": QUESTION, "openai/gsm8k/1": TOOL_QUESTION}


def test_the_agent_loop_flags_an_outage_sample_with_unscored_score(
    verl: SimpleNamespace,
    verl_model: str,
    verl_amaris: tuple[str, Any, FakeLLM],
    tmp_path: Path,
) -> None:
    url, services, _ = verl_amaris
    more = "+reward.custom_reward_function.reward_kwargs.unscored_score=0.5"
    config = step_config(verl, "amaris", url, verl_model, more)
    workers = [RewardWorker(verl, config) for _ in range(config.reward.num_workers)]
    down = f"The answer is 41. {DOWN}"
    scripts = {**SCRIPTS, QUESTION: [said("The answer is 42."), said(down)]}
    server = ScriptedServer(verl, scripts)
    batch = dataset(verl, config, tmp_path, rows(with_question=False))

    out, reward_tensor, infos = agent_loop_step(verl, config, batch, server, workers, step=1)

    responses = [
        server.tokenizer.decode(r, skip_special_tokens=True) for r in out.batch["responses"]
    ]
    which = responses.index(down)
    rewards = reward_tensor.sum(dim=-1).tolist()
    assert rewards[which] == 0.5 and rewards[1 - which] == 1.0
    assert [infos["status"][which], infos["unscored"][which]] == ["unscored", 1.0]
    assert [infos["status"][1 - which], infos["unscored"][1 - which]] == ["scored", 0.0]
    assert "judge_unavailable" in infos["reason"][which]
    # the unscored sample is logged once too, as unscored
    records = services.rollouts.load_step(0)
    assert sorted(r.status or "" for r in records) == ["scored"] * 3 + ["unscored"]
