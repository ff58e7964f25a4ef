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

The agent path: with examples/verl/agent_loop.yaml, verl's ``tool_agent`` samples run
amaris's ``AmarisToolAgentLoop``, and amaris receives each as a trajectory (the chat with
the tool call and its result, the finish reason, the turns); the score dict's keys (the
reward vector among them) land in the step's batch, where GDPO reads them.

Also: verl's reward-model path (``compute_rm_score``), where verl pads batches, and the
fully-async entry point, which migrates the old top-level ``custom_reward_function``.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

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
        "anchors",
        "adaptive",
    ]
    assert list(infos["anchors"]) == rewards and list(infos["adaptive"]) == [None] * 4
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


# -- the agent path: examples/verl/agent_loop.yaml's loop hands amaris the episode ----------

AGENT_LOOPS = Path(__file__).resolve().parents[2] / "examples" / "verl" / "agent_loop.yaml"
AGENT = (
    f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}",
    "+reward.custom_reward_function.reward_kwargs.anchor_ids=[A1]",
)
"""The agent path's overrides (docs/integrations.md): the loop, and the anchor ids to answer
reward-vector keys for (the test rubric's one anchor)."""
KEYS = ["score", "rubric_version", "status", "reason", "unscored", "anchors", "adaptive", "A1"]


@pytest.fixture
def amaris_loop(verl: SimpleNamespace) -> Iterator[None]:
    """The documented config replaces verl's ``tool_agent`` loop in verl's registry, which
    lives as long as the process: verl's own is registered back after the test."""
    yield
    tool_loop = importlib.import_module("verl.experimental.agent_loop.tool_agent_loop")
    verl.agent_loop.register("tool_agent")(tool_loop.ToolAgentLoop)


def trajectory(record: Any) -> dict[str, Any]:
    """What a logged rollout holds of a trajectory (``messages``, ``outcome``,
    ``finish_reason``: the log keeps them as sent); empty for a text rollout."""
    rollout = getattr(record, "rollout", record)
    return dict(rollout.model_extra or {})


def final_answer(record: Any) -> str:
    """A logged rollout's response, or its trajectory's last message."""
    sent = trajectory(record)
    return str(sent["messages"][-1]["content"]) if sent else str(record.rollout.output)


def test_the_tool_loop_sends_amaris_its_episode_and_the_reward_vector_reaches_verl(
    verl: SimpleNamespace,
    verl_model: str,
    verl_amaris: tuple[str, Any, FakeLLM],
    tmp_path: Path,
    amaris_loop: None,
) -> None:
    url, services, _ = verl_amaris
    gdpo = ("algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[anchors,A1]")
    config = step_config(verl, "amaris", url, verl_model, *AGENT, *gdpo)
    workers = [RewardWorker(verl, config) for _ in range(config.reward.num_workers)]
    server = ScriptedServer(verl, SCRIPTS)
    batch = dataset(verl, config, tmp_path, rows(with_question=False))

    out, reward_tensor, infos = agent_loop_step(verl, config, batch, server, workers, step=1)

    records = services.rollouts.load_step(0)
    assert len(records) == 4
    sent = {r.rollout.output: trajectory(r) for r in records}
    # the single-turn samples: a prompt and a response, as before
    assert sent["The answer is 42."] == {} and sent["The answer is 41."] == {}
    # the tool samples: the loop's chat with the tool call and the tool's result, why it
    # ended, and its turns; no solution_str, no special token
    episodes = [t for t in sent.values() if t]
    assert len(episodes) == 2
    finals = sorted(e["messages"][-1]["content"] for e in episodes)
    assert finals == ["So 6 * 7 = 42.", "So it is 7."]
    call = {
        "id": "call_1_0",
        "type": "function",
        "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'},
    }
    for episode in episodes:
        assert episode["messages"][:3] == [
            {"role": "user", "content": TOOL_QUESTION},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "42", "tool_call_id": "call_1_0"},
        ]
        assert episode["finish_reason"] == "stop" and episode["outcome"] is None
    logged = {r.rollout.output: r for r in records}
    for output, record in logged.items():
        if trajectory(record):
            assert record.rollout.input == TOOL_QUESTION
            assert record.rollout.group_id == "openai/gsm8k/1"
            assert record.rollout.metadata == {"data_source": "openai/gsm8k", "num_turns": 4}
            assert output.startswith("[1] assistant: \n    call call_1_0: multiply(")
    # the reward verl trains on is amaris's, on each sample's last response token
    responses = [
        server.tokenizer.decode(r, skip_special_tokens=True) for r in out.batch["responses"]
    ]
    answers = [r.rsplit("assistant: ", 1)[-1] for r in responses]  # a tool sample's last turn
    scores = {final_answer(r): r.score for r in records}
    rewards = reward_tensor.sum(dim=-1).tolist()
    assert rewards == [scores[answer] for answer in answers]
    assert {a: scores[a] for a in finals} == {"So 6 * 7 = 42.": 1.0, "So it is 7.": 0.0}
    last = out.batch["attention_mask"][:, out.batch["prompts"].size(1) :].sum(dim=1) - 1
    won = torch.tensor(rewards) > 0
    assert torch.equal(reward_tensor.argmax(dim=-1)[won], last[won])
    # the score dict's keys, as verl logs them beside the reward, one value per sample
    assert out.meta_info["reward_extra_keys"] == KEYS
    assert list(infos["score"]) == rewards
    assert list(infos["anchors"]) == rewards and list(infos["A1"]) == rewards
    assert list(infos["adaptive"]) == [None] * 4  # the rubric has no adaptive criteria yet
    # GDPO reads the keys it is given from the step's batch, as the trainer hands it over
    out.batch["token_level_rewards"] = reward_tensor
    out.non_tensor_batch.update({k: np.array(v) for k, v in infos.items()})
    gdpo_out = verl.trainer.compute_advantage(out, "gdpo", config=config.algorithm)
    advantage = (gdpo_out.batch["advantages"] * out.batch["response_mask"]).sum(dim=-1)
    assert torch.isfinite(advantage).all()
    assert [a > 0 for a in advantage.tolist()] == [r == 1.0 for r in rewards]
    # a null key (adaptive, before the rubric has adaptive criteria) is NaN to GDPO, on
    # every sample of the batch: why docs/integrations.md leaves it out of the keys
    with_null = OmegaConf.merge(config.algorithm, {"gdpo_reward_keys": ["anchors", "adaptive"]})
    poisoned = verl.trainer.compute_advantage(out, "gdpo", config=with_null)
    assert torch.isnan(poisoned.batch["advantages"]).all()


LONG = "So 6 * 7 = 42, " + "and 42 it stays, " * 16
"""A final answer that takes the response past ``rollout.response_length`` (256)."""


@pytest.mark.parametrize(
    ("reason", "more", "final"),
    [
        ("tool_limit", ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1"], "42."),
        ("stop", ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2"], "So 42."),
        ("length", [], LONG),
    ],
)
def test_the_episode_says_why_verl_ended_it(
    verl: SimpleNamespace,
    verl_model: str,
    verl_amaris: tuple[str, Any, FakeLLM],
    tmp_path: Path,
    amaris_loop: None,
    reason: str,
    more: list[str],
    final: str,
) -> None:
    url, services, _ = verl_amaris
    config = step_config(verl, "amaris", url, verl_model, *AGENT, *more)
    workers = [RewardWorker(verl, config) for _ in range(config.reward.num_workers)]
    scripts = {**SCRIPTS, TOOL_QUESTION: [calculator_then(final)] * 2}
    server = ScriptedServer(verl, scripts)
    batch = dataset(verl, config, tmp_path, rows(with_question=False))

    out, reward_tensor, infos = agent_loop_step(verl, config, batch, server, workers, step=1)

    episodes = [trajectory(r) for r in services.rollouts.load_step(0) if trajectory(r)]
    assert len(episodes) == 2 and all(e["finish_reason"] == reason for e in episodes)
    chats = [e["messages"] for e in episodes]
    if reason == "tool_limit":
        # verl stopped after the first generation, before parsing it: its tool call is in
        # the episode, never run
        (call,) = chats[0][1]["tool_calls"]
        assert chats[0][1:] == [{"role": "assistant", "content": "", "tool_calls": [call]}]
        assert call["function"] == {"name": "multiply", "arguments": '{"a": 6, "b": 7}'}
        assert list(out.non_tensor_batch["__num_turns__"][2:]) == [2, 2]
    elif reason == "stop":
        # the turn limit came with the policy's answer: verl stopped before parsing it
        assert [m["role"] for m in chats[0]] == ["user", "assistant", "tool", "assistant"]
        assert chats[0][-1] == {"role": "assistant", "content": final}
    else:
        # the last generation, cut in verl's response at response_length, whole here
        assert [m["role"] for m in chats[0]] == ["user", "assistant", "tool", "assistant"]
        assert chats[0][-1] == {"role": "assistant", "content": LONG}
        width = out.batch["prompts"].size(1)
        assert out.batch["attention_mask"][2:, width:].sum(dim=-1).tolist() == [256, 256]
    assert chats[0] == chats[1]
    # the single-turn samples keep the text path, and every sample the same keys
    assert out.meta_info["reward_extra_keys"] == KEYS
    assert list(infos["score"]) == reward_tensor.sum(dim=-1).tolist()


def test_an_unscored_episode_gets_unscored_score_on_every_key(
    verl: SimpleNamespace,
    verl_model: str,
    verl_amaris: tuple[str, Any, FakeLLM],
    tmp_path: Path,
    amaris_loop: None,
) -> None:
    url, services, _ = verl_amaris
    more = "+reward.custom_reward_function.reward_kwargs.unscored_score=0.5"
    config = step_config(verl, "amaris", url, verl_model, *AGENT, more)
    workers = [RewardWorker(verl, config) for _ in range(config.reward.num_workers)]
    down = f"So it is 7. {DOWN}"
    scripts = {**SCRIPTS, TOOL_QUESTION: [calculator_then("So 6 * 7 = 42."), calculator_then(down)]}
    server = ScriptedServer(verl, scripts)
    batch = dataset(verl, config, tmp_path, rows(with_question=False))

    out, reward_tensor, infos = agent_loop_step(verl, config, batch, server, workers, step=1)

    # the batch assembles: the unscored episode has the keys of the scored samples
    assert out.meta_info["reward_extra_keys"] == KEYS
    which = [i for i, status in enumerate(infos["status"]) if status == "unscored"]
    assert len(which) == 1 and which[0] >= 2  # a tool sample
    (i,) = which
    assert reward_tensor.sum(dim=-1).tolist()[i] == 0.5
    assert [infos[key][i] for key in ("unscored", "anchors", "adaptive", "A1")] == [1.0] + [0.5] * 3
    assert "judge_unavailable" in infos["reason"][i]
    statuses = sorted(r.status or "" for r in services.rollouts.load_step(0))
    assert statuses == ["scored"] * 3 + ["unscored"]
