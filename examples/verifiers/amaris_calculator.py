"""A verifiers 0.4.0 taskset whose rollouts amaris scores: ``--env.taskset.id amaris_calculator``.

Arithmetic questions with a calculator tool (an MCP toolset verifiers serves to the
harness). The task's own check, ``correct`` (the last reply holds the answer), is a metric,
recorded and not summed: amaris, plugged as the task's judge (eval.toml), gives the reward
and reads ``correct`` as the episode's outcome. Put this folder on ``PYTHONPATH`` (or
install it as a package) so verifiers finds the taskset and the judge by their ids.
"""

from __future__ import annotations

from collections.abc import Iterable

import verifiers.v1 as vf

__all__ = ["CalculatorTaskset"]

QUESTIONS = [("What is 17 * 23?", "391"), ("What is 6 * 7?", "42"), ("What is 144 / 12?", "12")]
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


class CalculatorToolset(vf.Toolset[vf.ToolsetConfig, vf.State]):
    """The ``calculate`` tool, advertised under its own name."""

    TOOL_PREFIX = None

    @vf.tool
    async def calculate(self, expression: str) -> str:
        """Evaluate ``a op b`` with op one of + - * /."""
        return calculate(expression)


class CalculatorData(vf.TaskData):
    answer: str
    """The reference answer: amaris's ``supplemental_context``."""


class CalculatorTask(vf.Task[CalculatorData, vf.State, vf.TaskConfig]):
    @vf.metric
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the last reply holds the answer: the outcome amaris reads."""
        return 1.0 if self.data.answer in trace.last_reply else 0.0

    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [CalculatorToolset(vf.ToolsetConfig())]


class CalculatorTaskset(vf.Taskset[CalculatorTask, vf.TasksetConfig]):
    def load(self) -> Iterable[CalculatorTask]:
        for question, answer in QUESTIONS:
            data = CalculatorData(
                prompt=question,
                system_prompt="Use the calculate tool, then give the number.",
                answer=answer,
            )
            yield CalculatorTask(data, self.config.task)
