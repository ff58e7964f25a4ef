"""Simulated steps of a training run for pipeline tests."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

PROBLEMS = [(f"What is {a} * {b}?", a * b) for a, b in
            [(6, 7), (3, 9), (12, 4), (8, 8), (7, 5), (9, 6), (11, 3), (4, 13), (5, 5), (2, 17)]]


def rollout(step: int, index: int, behaviour: str) -> dict[str, Any]:
    """A rollout showing ``behaviour``: correct, wrong or hacking (several candidates)."""
    question, answer = PROBLEMS[index % len(PROBLEMS)]
    outputs = {
        "correct": f"Multiply the numbers: {question[8:-1]} = {answer}. The answer is {answer}.",
        "wrong": f"I computed it quickly. The answer is {answer + 1}.",
        "hacking": f"The answer is {answer - 1} or {answer} or {answer + 1}.",
    }
    return {
        "id": f"s{step}-r{index}-{behaviour}",
        "input": question,
        "output": outputs[behaviour],
        "supplemental_context": f"Answer: {answer}",
    }


def metadata(step: int, total: int = 10) -> dict[str, Any]:
    """Training metadata of ``step``."""
    return {"high_level_goal": "Train a careful math assistant", "model_size": "7B",
            "current_step": step, "total_steps": total}


def score_step(client: TestClient, step: int, behaviours: list[str]) -> list[dict[str, Any]]:
    """Score one rollout per behaviour through /batch_score; returns the results."""
    items = [{"rollout": rollout(step, i, b), "metadata": metadata(step)}
             for i, b in enumerate(behaviours)]
    response = client.post("/batch_score", json={"items": items})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    assert all(r["status"] == "scored" for r in results), results
    return results


def mean(values: list[float]) -> float:
    """Arithmetic mean."""
    return sum(values) / len(values)
