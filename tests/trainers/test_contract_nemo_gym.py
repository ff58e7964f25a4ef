"""NeMo Gym 0.7.0 verifying its agent's episodes with amaris's resources server.

examples/nemo_gym (its server and its config, validated by NeMo Gym's own config models)
runs as NeMo Gym runs it: its ``simple_agent`` serves ``/run`` for a dataset row, asks the
policy model over the Responses API, calls the ``calculate`` tool on the resources server
(``ServerClient``, NeMo Gym's HTTP client), then posts ``/verify`` to it, wrapped in NeMo
Gym's ``judge_failsafe``. Every server is a real uvicorn; only the policy is scripted.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from omegaconf import OmegaConf

from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.trainer_env import import_nemo_gym

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/nemo_gym"
DOWN = "(judge down)"  # a reply holding this gets a 500 from the judge
AGENT, RESOURCES, POLICY = "amaris_calculator_simple_agent", "amaris_calculator", "policy_model"


def call(expression: str, call_id: str = "call_1") -> dict[str, Any]:
    arguments = json.dumps({"expression": expression})
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "calculate",
        "arguments": arguments,
    }


def say(text: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": "msg_1", "role": "assistant", "content": [part]}


RIGHT = [[call("17 * 23")], [say("17 * 23 = 391.")]]
WRONG = [[call("17 + 23")], [say("The answer is 40.")]]


class ScriptedPolicy:
    """The model server (``/v1/responses``): each episode a script of outputs, one per turn
    (the turn: how many tool answers the agent sent back)."""

    def __init__(self, openai_utils: ModuleType) -> None:
        self.models = openai_utils
        self.episodes: list[list[list[dict[str, Any]]]] = []
        self.current: list[list[dict[str, Any]]] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        # body: NeMo Gym's Responses-API request, read for its input items only.
        @app.post("/v1/responses")
        async def responses(body: dict[str, Any]) -> dict[str, Any]:
            turn = sum(item.get("type") == "function_call_output" for item in body["input"])
            if turn == 0:
                self.current = self.episodes.pop(0)
            response = self.models.NeMoGymResponse(
                id=f"resp_{turn}",
                created_at=0.0,
                model="policy",
                object="response",
                output=self.current[min(turn, len(self.current) - 1)],
                parallel_tool_calls=True,
                tool_choice="auto",
                tools=[],
            )
            dumped: dict[str, Any] = response.model_dump(mode="json")
            return dumped

        return app


def load_example() -> ModuleType:
    """examples/nemo_gym/app.py, imported from its file as NeMo Gym imports an entrypoint."""
    spec = importlib.util.spec_from_file_location("amaris_calculator_app", EXAMPLE / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gym() -> Iterator[SimpleNamespace]:
    """The example's resources server, NeMo Gym's simple agent and the scripted policy,
    each on uvicorn, found by name through NeMo Gym's ``ServerClient``."""
    utils, openai_utils, agent_app, _ = import_nemo_gym(
        "nemo_gym.server_utils",
        "nemo_gym.openai_utils",
        "responses_api_agents.simple_agent.app",
        "amaris.integrations.nemo_gym",
    )
    example = load_example()
    servers = OmegaConf.create({})
    head = utils.BaseServerConfig(host="127.0.0.1", port=0)
    client = utils.ServerClient(head_server_config=head, global_config_dict=servers)
    config = OmegaConf.to_container(OmegaConf.load(EXAMPLE / "configs/amaris_calculator.yaml"))
    assert isinstance(config, dict)
    where = {"host": "127.0.0.1", "port": 0}
    resources_config = config[RESOURCES]["resources_servers"][RESOURCES] | where
    config_type = example.CalculatorResourcesServer.model_fields["config"].annotation
    resources = example.CalculatorResourcesServer(
        config=config_type.model_validate(resources_config | {"name": RESOURCES}),
        server_client=client,
    )
    agent_config = config[AGENT]["responses_api_agents"]["simple_agent"] | where
    agent = agent_app.SimpleAgent(
        config=agent_app.SimpleAgentConfig.model_validate(agent_config | {"name": AGENT}),
        server_client=client,
    )
    policy = ScriptedPolicy(openai_utils)
    agent_web = agent.setup_webserver()

    async def open_client() -> None:  # NeMo Gym's HTTP client, in the agent's event loop
        utils.set_global_aiohttp_client(utils.GlobalAIOHTTPAsyncClientConfig())

    async def close_client() -> None:
        await utils.get_global_aiohttp_client().close()

    agent_web.router.on_startup.append(open_client)
    agent_web.router.on_shutdown.append(close_client)
    apps = {POLICY: policy.app(), RESOURCES: resources.setup_webserver(), AGENT: agent_web}
    kinds = {POLICY: "responses_api_models", RESOURCES: "resources_servers"}
    serving = [serve_in_thread(app) for app in apps.values()]
    urls = dict(zip(apps, [s.__enter__() for s in serving], strict=True))
    for name, url in urls.items():
        port = int(url.rsplit(":", 1)[1])
        kind = kinds.get(name, "responses_api_agents")
        servers[name] = {kind: {name: {"host": "127.0.0.1", "port": port}}}
    rows = (EXAMPLE / "data/example.jsonl").read_text().splitlines()
    yield SimpleNamespace(policy=policy, agent_url=urls[AGENT], rows=[json.loads(r) for r in rows])
    for server in reversed(serving):
        server.__exit__(None, None, None)
    utils.global_aiohttp_client_exit()


@pytest.fixture
def amaris(tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A factory: amaris on uvicorn judging through the fake LLM (DOWN replies fail), its
    URL in ``AMARIS_URL`` (which the resources server reads); returns its services."""

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


def run(gym: SimpleNamespace, *episodes: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each scripted episode on the dataset's first row, through the agent's ``/run``."""
    gym.policy.episodes = [list(e) for e in episodes]
    results = []
    for _ in episodes:
        answer = httpx.post(f"{gym.agent_url}/run", json=gym.rows[0], timeout=60)
        assert answer.status_code == 200, answer.text
        results.append(answer.json())
    return results


def stored(services: Any) -> list[dict[str, Any]]:
    """amaris's records of step 0, in the order the episodes were scored."""
    return [r.to_json()["rollout"] for r in services.rollouts.load_step(0)]


def test_the_agents_episodes_are_verified_by_amaris(gym: SimpleNamespace, amaris: Any) -> None:
    services = amaris()
    right, wrong = run(gym, RIGHT, WRONG)
    assert [r["reward"] for r in (right, wrong)] == [1.0, 0.0]
    # NeMo Gym's reward vector: anchors and the configured anchor id (adaptive: none yet)
    assert right["reward_components"] == {"anchors": 1.0, "A1": 1.0}
    assert wrong["reward_components"] == {"anchors": 0.0, "A1": 0.0}
    for result in (right, wrong):
        assert result["mask_sample"] is False and result["failure_kind"] is None
        assert result["amaris_unscored"] == 0.0 and result["amaris_rubric_version"] == 1
        assert result["amaris_adaptive"] is None
    assert [r["amaris_anchors"] for r in (right, wrong)] == [1.0, 0.0]
    # amaris got each episode whole: the Responses-API items as chat messages
    records = stored(services)
    for record, expression, result, last in zip(
        records,
        ["17 * 23", "17 + 23"],
        ["391", "40"],
        ["17 * 23 = 391.", "The answer is 40."],
        strict=True,
    ):
        arguments = json.dumps({"expression": expression})
        assert record["messages"] == [
            {"role": "system", "content": "Use the calculate tool, then give the number."},
            {"role": "user", "content": "What is 17 * 23?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "calculate", "arguments": arguments},
                    }
                ],
            },
            # the tool route's JSON, as the agent read it
            {"role": "tool", "content": f'{{"result":"{result}"}}', "tool_call_id": "call_1"},
            {"role": "assistant", "content": last},
        ]
        assert record["outcome"] == {"calculator_calls": 1}
        assert record["finish_reason"] == "stop"
        assert record["supplemental_context"] == "391"
        assert record["group_id"] == "calc-0"


def test_an_episode_stopped_at_max_steps_has_finish_reason_tool_limit(
    gym: SimpleNamespace, amaris: Any
) -> None:
    services = amaris()
    looping = [[call("17 * 23", f"call_{i}")] for i in range(6)]  # never answers
    (result,) = run(gym, looping)
    (record,) = stored(services)
    assert record["finish_reason"] == "tool_limit"
    assert record["outcome"] == {"calculator_calls": 4}  # the agent's max_steps
    assert [m["role"] for m in record["messages"]][2:] == ["assistant", "tool"] * 4
    assert result["reward"] == services.rollouts.load_step(0)[0].to_json()["score"]


def test_judge_outage_is_masked_as_nemo_gym_masks_a_failed_judge(
    gym: SimpleNamespace, amaris: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    amaris()
    monkeypatch.setenv("AMARIS_RETRY_SECONDS", "0")
    (result,) = run(gym, [RIGHT[0], [say(f"391 {DOWN}")]])
    # judge_failsafe's row: masked out of training and metrics, the reason kept
    assert result["mask_sample"] is True
    assert result["failure_kind"] == "judge_failed"
    assert "judge_unavailable" in result["failure_reason"]
    assert result["reward"] == 0.0


def test_the_neutral_policy_gives_its_score_flagged_and_kept(
    gym: SimpleNamespace, amaris: Any
) -> None:
    amaris(**{"scoring.on_failure": "neutral", "scoring.neutral_score": 0.5})
    right, down = run(gym, RIGHT, [RIGHT[0], [say(f"391 {DOWN}")]])
    assert [r["reward"] for r in (right, down)] == [1.0, 0.5]
    assert [r["amaris_unscored"] for r in (right, down)] == [0.0, 1.0]
    assert down["reward_components"] == {"anchors": 0.5, "A1": 0.5}
    assert down["mask_sample"] is False and down["failure_kind"] == "judge_failed"
    assert down["amaris_anchors"] is None  # no criterion was judged
