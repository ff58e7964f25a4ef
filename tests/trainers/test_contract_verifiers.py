"""verifiers 0.4.0 scoring its rollouts' traces with amaris as the task's judge.

A finished ``vf-eval`` run of examples/verifiers (its eval.toml, validated by verifiers'
``EvalConfig``, the taskset and the judge found by their ids) is written with verifiers'
own store: each trace built turn by turn by its message graph (``prepare_turn`` /
``commit``, as its interception records a model call). ``vf-replay``'s re-scoring
(``run_replay``) then scores every trace through ``Task.score``: the task's metric, then
the plugged judge (or a plugged reward function), and records what fails on the trace.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.trainer_env import install_verifiers

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/verifiers"
DOWN = "(judge down)"  # a reply holding this gets a 500 from the judge


@pytest.fixture(scope="module")
def vf() -> Iterator[SimpleNamespace]:
    """verifiers' modules, imported once the pinned package is on sys.path, and the
    example's folder on sys.path (where verifiers finds its taskset and judge by id)."""
    install_verifiers()
    sys.path.insert(0, str(EXAMPLE))
    names = {
        "graph": "graph",
        "replay": "cli.replay",
        "output": "cli.output",
        "resolve": "cli.resolve",
        "eval": "configs.cli.eval",
        "replay_config": "configs.cli.replay",
        "trace_store": "utils.trace_store",
    }
    modules = {k: importlib.import_module(f"verifiers.v1.{n}") for k, n in names.items()}
    yield SimpleNamespace(v1=importlib.import_module("verifiers.v1"), **modules)
    sys.path.remove(str(EXAMPLE))


@pytest.fixture
def amaris(tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A factory: amaris on uvicorn judging through the fake LLM (DOWN replies fail), its
    URL in ``AMARIS_URL``; returns its services."""

    def judge(body: dict[str, Any]) -> Reply:
        return Reply(status=500) if DOWN in json.dumps(body) else offline_reply(body)

    fake_llm.default = judge
    stack: list[Any] = []

    def start(**overrides: Any) -> Any:
        settings = llm_settings(
            tmp_path,
            fake_llm,
            **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0, **overrides},
        )
        app = in_memory_app(settings)
        serving = serve_in_thread(app)
        monkeypatch.setenv("AMARIS_URL", serving.__enter__())
        stack.append(serving)
        return app.state.services

    yield start
    for serving in reversed(stack):
        serving.__exit__(None, None, None)


def eval_config(vf: SimpleNamespace, **judge: Any) -> Any:
    """examples/verifiers/eval.toml as ``vf-eval`` reads it, the judge's options updated."""
    raw = tomllib.loads((EXAMPLE / "eval.toml").read_text())
    raw["env"]["taskset"]["task"]["judges"][0].update(judge)
    return vf.eval.EvalConfig.model_validate(raw)


def episode(vf: SimpleNamespace, task: Any, expression: str, answer: str, stop: str) -> Any:
    """A rollout's trace as verifiers records it: the policy calls ``calculate``, reads its
    result, answers; each model call committed to the trace's message graph."""
    v1 = vf.v1
    trace = v1.Trace(
        task=v1.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=v1.AgentInfo(config=v1.AgentConfig(model="policy")),
    )
    call = v1.ToolCall(
        id="call_1", name="calculate", arguments=json.dumps({"expression": expression})
    )
    replies = [
        v1.AssistantMessage(content=None, tool_calls=[call]),
        v1.AssistantMessage(content=answer),
    ]
    messages = [
        v1.SystemMessage(content=task.data.system_prompt),
        v1.UserMessage(content=task.data.prompt),
    ]
    for i, reply in enumerate(replies):
        turn = vf.graph.prepare_turn(trace, list(messages), [v1.Tool(name="calculate")])
        finish = "tool_calls" if reply.tool_calls else "stop"
        response = v1.Response(
            id=f"r{i}", created=0, model="policy", message=reply, finish_reason=finish
        )
        turn.commit(response)
        messages.append(reply)
        result = sys.modules["amaris_calculator"].calculate(expression)
        messages += [
            v1.ToolMessage(tool_call_id=c.id, content=result) for c in reply.tool_calls or []
        ]
    trace.stop(stop)
    trace.is_completed = trace.ok = True
    return trace


def replay(
    vf: SimpleNamespace, tmp_path: Path, config: Any, traces: list[Any], task: Any = None
) -> list[Any]:
    """Write the run (its config and traces, by verifiers' store) and re-score it as
    ``vf-replay <run>`` does, with ``task`` as the taskset's task config when given;
    the re-scored traces, in order."""
    source, out = tmp_path / "run", tmp_path / "replay"
    vf.output.save_config(config, source, "eval.json")

    async def run() -> list[Any]:
        lock = asyncio.Lock()
        for trace in traces:
            await vf.trace_store.append_trace(source, trace, lock, env=config.env.env_id)
        saved = json.loads(vf.output.saved_config_path(source).read_text())
        layered = {**saved, "rich": False, "output_dir": str(out), "max_concurrent": 1}
        if task is not None:
            layered["taskset"] = {**saved["env"]["taskset"], "task": task}
        kind = vf.resolve.narrow_taskset_config(vf.replay_config.ReplayConfig, "amaris_calculator")
        return list(await vf.replay.run_replay(kind.model_validate(layered), source, out))

    return asyncio.run(run())


def stored(services: Any) -> list[dict[str, Any]]:
    """amaris's records of step 0, in the order the traces were scored."""
    return [r.to_json()["rollout"] for r in services.rollouts.load_step(0)]


def test_the_judge_scores_each_trace_and_records_the_reward_vector(
    vf: SimpleNamespace, amaris: Any, tmp_path: Path
) -> None:
    services = amaris()
    config = eval_config(vf)
    (judge,) = config.env.taskset.task.judges
    assert type(judge).__name__ == "AmarisJudgeConfig" and judge.name == "amaris"
    task = next(iter(vf.v1.load_taskset(config.env.taskset)))
    assert (task.data.prompt, task.data.answer) == ("What is 17 * 23?", "391")
    right = episode(vf, task, "17 * 23", "17 * 23 = 391.", "agent_completed")
    wrong = episode(vf, task, "17 + 23", "The answer is 40.", "max_turns")
    scored = replay(vf, tmp_path, config, [right, wrong])
    assert [t.ok for t in scored] == [True, True]
    # the task's metric first, then amaris's reward: the only reward, so the trace's
    assert [t.metrics["correct"] for t in scored] == [1.0, 0.0]
    assert [t.rewards["amaris"].score for t in scored] == [1.0, 0.0]
    assert [t.reward for t in scored] == [1.0, 0.0]
    # the reward vector beside it, as metrics (not summed)
    assert [t.metrics["amaris/anchors"] for t in scored] == [1.0, 0.0]
    assert [t.metrics["amaris/A1"] for t in scored] == [1.0, 0.0]
    assert [t.metrics["amaris/adaptive"] for t in scored] == [None, None]  # none yet
    assert [t.metrics["amaris/rubric_version"] for t in scored] == [1.0, 1.0]
    assert [t.metrics["amaris/unscored"] for t in scored] == [0.0, 0.0]
    # amaris got each whole episode: tool call and result, outcome, finish, reference
    records = sorted(stored(services), key=lambda r: r["messages"][-1]["content"])
    for record, trace, expression, result in zip(
        records, scored, ["17 * 23", "17 + 23"], ["391", "40"], strict=True
    ):
        call = {"name": "calculate", "arguments": json.dumps({"expression": expression})}
        assert record["messages"][:4] == [
            {"role": "system", "content": "Use the calculate tool, then give the number."},
            {"role": "user", "content": "What is 17 * 23?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
            },
            {"role": "tool", "content": result, "tool_call_id": "call_1"},
        ]
        assert record["messages"][4] == {"role": "assistant", "content": trace.last_reply}
        assert record["id"] == f"verifiers-{trace.id}"
        assert record["supplemental_context"] == "391"
        assert record["group_id"] == task.key
    assert [r["outcome"] for r in records] == [{"correct": 1.0}, {"correct": 0.0}]
    assert [r["finish_reason"] for r in records] == ["stop", "tool_limit"]


def test_judge_outage_is_a_failed_rollout_naming_amaris_reason(
    vf: SimpleNamespace, amaris: Any, tmp_path: Path
) -> None:
    amaris()
    config = eval_config(vf, retry_seconds=0.0)
    task = next(iter(vf.v1.load_taskset(config.env.taskset)))
    down = episode(vf, task, "17 * 23", f"391 {DOWN}", "agent_completed")
    (trace,) = replay(vf, tmp_path, config, [down])
    # verifiers' own failed rollout: not ok, the error on the trace, no reward
    assert not trace.ok
    assert trace.last_error.type == "TaskError"
    assert "RewardUnavailableError" in trace.last_error.message
    assert "judge_unavailable" in trace.last_error.message
    assert trace.rewards["amaris"] is None
    assert "amaris/anchors" not in trace.metrics
    # and so it is stored, for verifiers' resume to redo it
    (saved,) = vf.trace_store.read_episodes(tmp_path / "replay", vf.v1.WireTrace)
    assert not saved.ok


def test_the_reward_function_with_the_neutral_policy_gives_its_score_flagged(
    vf: SimpleNamespace, amaris: Any, tmp_path: Path
) -> None:
    services = amaris(**{"scoring.on_failure": "neutral", "scoring.neutral_score": 0.5})
    config = eval_config(vf)
    task = next(iter(vf.v1.load_taskset(config.env.taskset)))
    right = episode(vf, task, "17 * 23", "17 * 23 = 391.", "agent_completed")
    down = episode(vf, task, "17 * 23", f"391 {DOWN}", "agent_completed")
    plugged = {"rewards": {"amaris": {"fn": "amaris.integrations.verifiers:amaris_reward"}}}
    scored = replay(vf, tmp_path, config, [right, down], task=plugged)
    assert [t.ok for t in scored] == [True, True]
    assert [t.rewards["amaris"].score for t in scored] == [1.0, 0.5]
    assert [t.metrics["amaris/unscored"] for t in scored] == [0.0, 1.0]
    assert [t.metrics["amaris/anchors"] for t in scored] == [1.0, None]  # no verdict
    # a reward function runs beside the task's rewards, after its metrics
    assert [r["outcome"] for r in stored(services)] == [{"correct": 1.0}, {"correct": 1.0}]
