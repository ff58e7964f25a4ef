"""A trainer's episode written as ``rollout.messages`` (amaris/integrations/episodes.py)."""

from __future__ import annotations

import json

from amaris.integrations.episodes import episode_messages, reward_keys
from amaris.models import Rollout


def test_a_text_prompt_and_completion_are_a_user_and_an_assistant_message() -> None:
    assert episode_messages("What is 2+2?", "4") == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
    ]


def test_tool_calls_get_ids_string_arguments_and_their_answers() -> None:
    sent = episode_messages(
        [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Fix it"}],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"function": {"name": "bash", "arguments": {"cmd": "pytest"}}},
                    {"id": "given", "name": "read", "arguments": '{"path": "a.py"}'},
                ],
            },
            {"role": "tool", "content": "1 failed"},
            {"role": "tool", "tool_call_id": "given", "content": [{"type": "text", "text": "x"}]},
            {"role": "assistant", "content": "Fixed.", "reasoning_content": "hidden"},
        ],
    )
    calls = sent[2]["tool_calls"] or []
    assert sent[0]["role"] == "system"
    assert [c["id"] for c in calls] == ["call_2_0", "given"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"cmd": "pytest"}
    assert calls[1]["function"] == {"name": "read", "arguments": '{"path": "a.py"}'}
    assert [m.get("tool_call_id") for m in sent[3:5]] == ["call_2_0", "given"]
    assert sent[4]["content"] == "x"
    assert sent[5] == {"role": "assistant", "content": "Fixed."}
    # The server takes it as it is.
    rollout = Rollout.model_validate({"id": "e", "messages": sent})
    assert "tool result for call_2_0: 1 failed" in rollout.output


def test_the_reward_keys_are_the_fixed_two_then_the_anchor_ids() -> None:
    assert reward_keys(["A1", "A2"]) == ["anchors", "adaptive", "A1", "A2"]
