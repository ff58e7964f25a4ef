"""The file to give OpenRLHF 0.11: ``--train.agent_func_path examples/openrlhf/agent_func.py``.

A calculator environment: the policy writes ``<calc>6 * 7</calc>`` to call the tool, the
environment answers ``<result>42</result>`` (a tool message for amaris), and the episode
ends at the first turn without a call (or after ``MAX_CALLS`` calls: finish reason
``tool_limit``). amaris scores the whole episode when it ends, the label
(``--data.label_key``) as the reference answer; the rubric's anchor ``A1`` is logged beside
``anchors`` and ``adaptive``. For a chat model, put its template's turn tokens around the
feedback ``text`` (what the policy reads next); ``content`` is what amaris reads.

Configuration from the environment: AMARIS_URL, AMARIS_API_KEY, AMARIS_STEP,
AMARIS_RETRY_SECONDS (see amaris/integrations/openrlhf_agent.py). A judge outage fails the
step unless the amaris server runs with ``scoring.on_failure: neutral``.
"""

from __future__ import annotations

from amaris.integrations.openrlhf_agent import AmarisAgentExecutor, AmarisAgentInstance, Feedback

MAX_CALLS = 4
OPEN, CLOSE = "<calc>", "</calc>"
MAX_EXPRESSION = 64


def calculate(expression: str) -> str:
    """``a op b`` (numbers; op one of ``+ - * /``) evaluated, or an error text."""
    text = expression.strip()
    if len(text) > MAX_EXPRESSION:
        return "error: expression too long"
    # The operator: the first one after the first character (which may be a sign).
    at = next((i for i, c in enumerate(text) if i > 0 and c in "+-*/"), 0)
    try:  # without an operator, text[:0] is no number
        left, right = float(text[:at]), float(text[at + 1 :])
    except ValueError:
        return "error: expected <number> <+-*/> <number>"
    if text[at] == "+":
        value = left + right
    elif text[at] == "-":
        value = left - right
    elif text[at] == "*":
        value = left * right
    elif right == 0:
        return "error: division by zero"
    else:
        value = left / right
    return str(int(value)) if value.is_integer() else str(value)


class Calculator(AmarisAgentInstance):
    """One episode with the calculator tool."""

    anchor_ids = ("A1",)

    async def environment(self, action: str) -> Feedback:
        calls = sum(turn.get("role") == "tool" for turn in self.turns)
        start = action.find(OPEN)
        end = action.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
        if end < 0:  # no call: the final answer
            return Feedback(done=True, outcome={"calculator_calls": calls})
        result = calculate(action[start + len(OPEN) : end])
        limit = calls + 1 >= MAX_CALLS
        return Feedback(
            text=f"\n<result>{result}</result>\n",
            role="tool",
            content=result,
            done=limit,
            finish_reason="tool_limit" if limit else None,
            outcome={"calculator_calls": calls + 1},
        )


class AgentExecutor(AmarisAgentExecutor):
    """What OpenRLHF loads from this file (``AgentExecutor()``)."""

    def __init__(self) -> None:
        super().__init__(Calculator)
