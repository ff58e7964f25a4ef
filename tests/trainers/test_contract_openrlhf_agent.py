"""OpenRLHF 0.11.2's agent path scoring whole episodes with amaris.

``python -m openrlhf.cli.train_ppo_ray --train.agent_func_path examples/openrlhf/agent_func.py``
is parsed up to ``ray.init``; OpenRLHF's own loader (``vllm_engine._load_agent_executor``)
loads the file's ``AgentExecutor``, and its rollout actor's ``generate_responses`` runs
it: OpenRLHF's ``MultiTurnAgentExecutor`` driving amaris's agent instance over several
turns (tokenizing, budgeting ``max_len``, appending the environment's feedback), then its
samples generator and experience maker turn the answers into a batch. Only vLLM's
generation is scripted, and ray runs in process (tests/support/trainer_env.py).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.trainer_env import (
    RayInitCalled,
    byte_tokenizer,
    install_trainers,
    stub_gpu_modules,
)

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

AGENT_FILE = Path(__file__).resolve().parents[2] / "examples/openrlhf/agent_func.py"
QUESTION = "What is 6 * 7? Answer with the number."
DOWN = "(judge down)"  # a response holding this gets a 500 from the judge
RIGHT = ["Let me compute. <calc>6 * 7</calc>", "The answer is 42."]
WRONG = ["I add them. <calc>6 + 7</calc>", "The answer is 13."]
JUDGE_DOWN = ["Let me compute it. <calc>6 * 7</calc>", "The answer is 42. " + DOWN]
LOGGED = {"amaris_anchors", "amaris_adaptive", "amaris_A1"}
LOGGED |= {"amaris_rubric_version", "amaris_unscored"}


@pytest.fixture(scope="module")
def openrlhf() -> SimpleNamespace:
    """OpenRLHF's modules, imported once the pinned package is on sys.path."""
    install_trainers()
    stub_gpu_modules()
    return SimpleNamespace(
        agent=importlib.import_module("openrlhf.utils.agent"),
        engine=importlib.import_module("openrlhf.trainer.ray.vllm_engine"),
        samples=importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator"),
        maker=importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker"),
        dataset=importlib.import_module("openrlhf.datasets.prompts_dataset"),
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


def agent_args(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ``args`` OpenRLHF's ``train_ppo_ray`` hands to ``train`` for the agent flags of
    docs/integrations.md (examples/openrlhf/config.sh)."""
    flags = [
        "--actor.model_name_or_path", "tiny",
        "--actor.num_gpus_per_node", "1",
        "--train.agent_func_path", str(AGENT_FILE),
        "--data.input_key", "question",
        "--data.label_key", "answer",
        "--rollout.batch_size", "2",
        "--rollout.n_samples_per_prompt", "2",
        "--rollout.micro_batch_size", "2",
        "--algo.advantage.estimator", "group_norm",
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["train_ppo_ray", *flags])
    with pytest.raises(RayInitCalled) as started:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    frame = started.tb
    while frame is not None and frame.tb_frame.f_code.co_name != "train":
        frame = frame.tb_next
    assert frame is not None, "training did not start from train(args)"
    return frame.tb_frame.f_locals["args"]


class ScriptedVLLM:
    """The GPU boundary: vLLM's generate, on the real ``RolloutRayActor.generate_responses``.
    Each episode follows a script of replies, one per turn (an episode is told by its first
    reply in the context: the scripts of a rollout start apart), cut at the token budget as
    vLLM cuts them."""

    def __init__(self, executor: Any, scripts: list[list[str]]) -> None:
        self.executor = executor
        self.tokenizer = byte_tokenizer()
        self.new = [list(s) for s in scripts]
        self.running: list[list[str]] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, **_: Any) -> Any:
        context = self.tokenizer.decode(prompt_token_ids)
        script = next((s for s in self.running if s[0] in context), None)
        if script is None:
            script = self.new.pop(0)
            self.running.append(script)
        reply = script[context.count("<result>")]
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        cut = len(ids) > sampling_params.max_tokens
        ids = ids[: sampling_params.max_tokens]
        output = SimpleNamespace(
            token_ids=ids,
            text=self.tokenizer.decode(ids),
            finish_reason="length" if cut else "stop",
            logprobs=None,
        )
        return SimpleNamespace(outputs=[output])


def episodes(
    openrlhf: SimpleNamespace,
    args: Any,
    scripts: list[list[str]],
    max_length: int = 2048,
    executor: Any = None,
) -> list[Any]:
    """One prompt of the dataset, an episode per script run concurrently by OpenRLHF's
    rollout actor with the executor it loads from ``--train.agent_func_path`` (or
    ``executor``), each made into an experience."""
    prompt, label = openrlhf.dataset.preprocess_data(
        {"question": QUESTION, "answer": "42"},
        input_key=args.data.input_key,
        label_key=args.data.label_key,
    )
    if executor is None:
        executor = openrlhf.engine._load_agent_executor(args.train.agent_func_path)
    engine = ScriptedVLLM(executor, scripts)
    answers = asyncio.run(
        openrlhf.engine.RolloutRayActor.generate_responses(
            engine,
            prompt=prompt,
            label=label,
            sampling_params=SimpleNamespace(max_tokens=32, logprobs=None),
            max_length=max_length,
            hf_tokenizer=engine.tokenizer,
            num_samples=len(scripts),
        )
    )
    generator = openrlhf.samples.SamplesGenerator
    return [
        generator._process_response_into_experience(None, a, max_len=max_length) for a in answers
    ]


def batch(openrlhf: SimpleNamespace, args: Any, samples: list[Any]) -> Any:
    """The experience maker's micro-batch of ``samples`` (``concat_experiences``)."""
    maker = openrlhf.maker.RemoteExperienceMaker(
        None, None, None, None, None, SimpleNamespace(args=args), byte_tokenizer()
    )
    (micro_batch,) = maker.split_rollout_samples(samples)
    return micro_batch


def info(micro_batch: Any, key: str) -> list[float]:
    values: list[float] = micro_batch.info[key].flatten().tolist()
    return values


def stored(services: Any) -> list[dict[str, Any]]:
    """amaris's records of step 0, by their final answer."""
    records = [r.to_json() for r in services.rollouts.load_step(0)]
    return sorted(records, key=lambda r: r["rollout"]["messages"][-1]["content"])


def test_the_agent_file_scores_each_whole_episode_once(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    args = agent_args(monkeypatch)
    assert args.train.agent_func_path == str(AGENT_FILE)
    assert args.reward.remote_url == ["agent"]  # the agent gives the rewards
    samples = episodes(openrlhf, args, [RIGHT, WRONG])
    micro_batch = batch(openrlhf, args, samples)
    assert micro_batch.rewards.flatten().tolist() == [1.0, 0.0]
    assert micro_batch.scores.flatten().tolist() == [1.0, 0.0]
    assert set(micro_batch.info) >= LOGGED
    assert info(micro_batch, "amaris_anchors") == [1.0, 0.0]
    assert info(micro_batch, "amaris_A1") == [1.0, 0.0]
    assert all(math.isnan(v) for v in info(micro_batch, "amaris_adaptive"))  # none yet
    assert info(micro_batch, "amaris_rubric_version") == [1.0, 1.0]
    assert info(micro_batch, "amaris_unscored") == [0.0, 0.0]
    # both actions of each episode are trained on: OpenRLHF's action mask spans two turns
    assert [int(s.action_mask.sum()) for s in samples] == [len("".join(RIGHT)), len("".join(WRONG))]
    # amaris got each episode once, whole: prompt, actions, the tool's answers, outcome
    records = stored(services)
    assert [r["score"] for r in records] == [0.0, 1.0]
    for record, (first, last), result in zip(records, [WRONG, RIGHT], ["13", "42"], strict=True):
        assert record["rollout"]["messages"] == [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": first},
            {"role": "tool", "content": result, "tool_call_id": "call_2"},
            {"role": "assistant", "content": last},
        ]
        assert record["rollout"]["outcome"] == {"calculator_calls": 1}
        assert record["rollout"]["finish_reason"] == "stop"
        assert record["rollout"]["supplemental_context"] == "42"


def test_an_episode_cut_at_max_len_is_scored_with_finish_reason_length(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    args = agent_args(monkeypatch)
    checked = ["The answer is 42; checking: <calc>6 * 7</calc>", "Checked: it is 42."]
    # the first turn and the tool's answer fill max_len: OpenRLHF stops without a done step
    max_length = len(QUESTION) + len(checked[0]) + len("\n<result>42</result>\n")
    (cut,) = episodes(openrlhf, args, [checked], max_length=max_length)
    (whole,) = episodes(openrlhf, args, [WRONG])
    micro_batch = batch(openrlhf, args, [cut, whole])
    (record, _) = sorted(stored(services), key=lambda r: len(r["rollout"]["messages"]))
    assert record["rollout"]["messages"][1:] == [
        {"role": "assistant", "content": checked[0]},
        {"role": "tool", "content": "42", "tool_call_id": "call_2"},
    ]
    assert (record["rollout"]["finish_reason"], record["score"]) == ("length", 1.0)
    # amaris's reward, not the 0.0 OpenRLHF starts from; logged with the same keys
    assert micro_batch.rewards.flatten().tolist() == [1.0, 0.0]
    assert set(micro_batch.info) >= LOGGED
    assert info(micro_batch, "amaris_anchors") == [1.0, 0.0]
    assert info(micro_batch, "amaris_unscored") == [0.0, 0.0]


def test_judge_outage_fails_the_rollout_naming_amaris_reason(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    monkeypatch.setenv("AMARIS_RETRY_SECONDS", "0")
    args = agent_args(monkeypatch)
    agent = importlib.import_module("amaris.integrations.openrlhf_agent")
    with pytest.raises(agent.RewardUnavailableError) as unscored:
        episodes(openrlhf, args, [JUDGE_DOWN])
    assert "1 of 1 samples unscored (sample 0: judge_unavailable" in str(unscored.value)
    (record,) = stored(services)  # the whole episode reached amaris, which had no verdict
    assert (record["status"], len(record["rollout"]["messages"])) == ("unscored", 4)


def test_neutral_policy_gives_its_score_flagged(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, _ = amaris(**{"scoring.on_failure": "neutral", "scoring.neutral_score": 0.5})
    monkeypatch.setenv("AMARIS_URL", url)
    args = agent_args(monkeypatch)
    micro_batch = batch(openrlhf, args, episodes(openrlhf, args, [RIGHT, JUDGE_DOWN]))
    assert micro_batch.rewards.flatten().tolist() == [1.0, 0.5]
    assert info(micro_batch, "amaris_unscored") == [0.0, 1.0]
    assert info(micro_batch, "amaris_A1")[0] == 1.0
    assert math.isnan(info(micro_batch, "amaris_A1")[1])  # no verdict: no value


def test_openrlhfs_own_executor_is_refused(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, services = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    args = agent_args(monkeypatch)
    calculator = openrlhf.engine._load_agent_executor(args.train.agent_func_path)
    plain = openrlhf.agent.MultiTurnAgentExecutor(calculator.agent_instance_cls)
    with pytest.raises(RuntimeError, match="AmarisAgentExecutor"):
        episodes(openrlhf, args, [RIGHT], executor=plain)
    assert services.rollouts.load_step(0) == []


def test_an_anchor_id_the_rubric_lacks_is_named(
    openrlhf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, amaris: Any
) -> None:
    url, _ = amaris()
    monkeypatch.setenv("AMARIS_URL", url)
    args = agent_args(monkeypatch)
    agent = importlib.import_module("amaris.integrations.openrlhf_agent")
    calculator = openrlhf.engine._load_agent_executor(args.train.agent_func_path)
    typo = type("Typo", (calculator.agent_instance_cls,), {"anchor_ids": ("A1", "A9")})
    with pytest.raises(ValueError, match=r"anchor_ids \['A9'\] are not criteria"):
        episodes(openrlhf, args, [RIGHT], executor=agent.AmarisAgentExecutor(typo))
