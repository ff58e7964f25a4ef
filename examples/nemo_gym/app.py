"""A NeMo Gym 0.7.0 resources server scored by amaris: a calculator tool, amaris's ``/verify``.

Copy this folder into NeMo Gym as ``resources_servers/amaris_calculator/`` and start it
with its agent: ``ng_run "+config_paths=[resources_servers/amaris_calculator/configs/
amaris_calculator.yaml]"`` (amaris running at ``AMARIS_URL``). NeMo Gym's ``simple_agent``
calls the ``calculate`` tool on this server as the policy asks, then posts ``/verify``:
amaris scores the whole episode (amaris/integrations/nemo_gym.py), with the number of
calculator calls as its outcome and the row's ``expected_answer`` as the reference.
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel

from amaris.integrations.nemo_gym import AmarisResourcesServer, AmarisVerifyRequest

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


class CalculateRequest(BaseModel):
    expression: str


class CalculateResponse(BaseModel):
    result: str


class CalculatorResourcesServer(AmarisResourcesServer):
    """amaris's resources server with the ``calculate`` tool route."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/calculate")(self.calculate)
        return app

    async def calculate(self, body: CalculateRequest) -> CalculateResponse:
        return CalculateResponse(result=calculate(body.expression))

    def outcome(self, body: AmarisVerifyRequest) -> dict[str, int]:
        """What the environment knows for sure: how often the policy used the tool."""
        calls = [o for o in body.response.output if o.type == "function_call"]
        return {"calculator_calls": sum(call.name == "calculate" for call in calls)}


if __name__ == "__main__":
    CalculatorResourcesServer.run_webserver()
