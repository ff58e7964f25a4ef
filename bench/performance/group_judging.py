"""Judge tokens per rollout of listwise group judging against pointwise judging.

Starts, for each mode in turn, ``amaris offline-llm`` (the rule-based judge behind an
OpenAI-compatible API, which reports a quarter of a request's characters as its prompt
tokens and of its answer's as completion tokens) and ``amaris serve`` judging through it with
``scoring.group_mode`` ``pointwise`` then ``listwise``, the score cache off. Each scores the
same step of GRPO groups in ``POST /batch_score`` batches of whole groups: ``--prompts``
arithmetic questions (the reference answer as ``supplemental_context``) with ``--rollouts``
responses each, half right and half wrong in varied wording, one ``group_id`` per question.

Reported per mode, from amaris's own usage accounting (``/metrics``
``amaris_llm_tokens{agent="scorer"}``, the tokens the endpoint reported): judge calls,
prompt and completion tokens per rollout; and the share of (right, wrong) pairs of a group
where the right response got the higher reward (1.0: every right answer outranked every
wrong one). ``--smoke``: 2 prompts of 4 rollouts, printed, not written to the page.

Usage::

    .venv/bin/python -m bench.performance.group_judging [--prompts 32] [--rollouts 8]
        [--batch-groups 8] [--out docs/benchmarks.md] [--smoke]
"""

from __future__ import annotations

import argparse
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from bench._common import (
    doc_section,
    markers,
    raise_interrupt,
    report_path,
    running_stack,
    work_folder,
    write_doc,
)

NAME = "group_judging"
MODES = ("pointwise", "listwise")
SMOKE = {"prompts": 2, "rollouts": 4, "batch_groups": 2}


def group_items(prompt: int, rollouts: int) -> list[dict[str, Any]]:
    """One GRPO group: ``rollouts`` responses to question ``prompt``, right ones first."""
    a, b = 17 + 3 * prompt, 25 + 7 * prompt
    answer = a + b
    right = [f"{answer}", f"The answer is {answer}.", f"{a} + {b} = {answer}", f"So: {answer}"]
    wrong = [f"{answer + 1}", f"The answer is {answer - 10}.", f"{a} + {b} = {answer + 2}"]
    wrong.append(f"I think it is {answer * 2}.")
    half = rollouts // 2
    outputs = [right[i % 4] + " " * (i // 4) for i in range(rollouts - half)]
    outputs += [wrong[i % 4] + " " * (i // 4) for i in range(half)]
    return [
        {
            "rollout": {
                "id": f"p{prompt}-r{i}",
                "input": f"What is {a} + {b}? Give the number.",
                "output": output,
                "supplemental_context": str(answer),
                "group_id": f"p{prompt}",
            },
            "metadata": {"current_step": 1},
        }
        for i, output in enumerate(outputs)
    ]


@dataclass(frozen=True)
class Result:
    mode: str
    rollouts: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    ordered_pairs: float
    listwise: int

    @property
    def per_rollout(self) -> tuple[float, float]:
        return self.prompt_tokens / self.rollouts, self.completion_tokens / self.rollouts


def scorer_usage(metrics: str) -> tuple[int, int, int]:
    """Calls, prompt and completion tokens of the scorer agent in a ``/metrics`` text."""
    calls = prompt = completion = 0.0
    for line in metrics.splitlines():
        if not line.startswith("amaris_llm_") or 'agent="scorer"' not in line:
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith("amaris_llm_model_calls_total"):
            calls += value
        elif line.startswith("amaris_llm_tokens_total") and 'kind="prompt"' in line:
            prompt += value
        elif line.startswith("amaris_llm_tokens_total") and 'kind="completion"' in line:
            completion += value
    return int(calls), int(prompt), int(completion)


def ordered_share(groups: list[list[tuple[bool, float]]]) -> float:
    """Share of (right, wrong) pairs within a group where the right one scored higher."""
    won = total = 0
    for group in groups:
        rights = [s for ok, s in group if ok]
        wrongs = [s for ok, s in group if not ok]
        for r in rights:
            for w in wrongs:
                total += 1
                won += r > w
    return won / total if total else 0.0


def run_mode(mode: str, folder: Path, prompts: int, rollouts: int, batch_groups: int) -> Result:
    sections = {"scoring": {"group_mode": mode, "cache_size": 0}}
    (folder / mode).mkdir()
    with running_stack(0, folder / mode, sections) as stack, httpx2.Client(timeout=600) as http:
        groups: list[list[tuple[bool, float]]] = []
        listwise = 0
        for first in range(0, prompts, batch_groups):
            batch = [
                group_items(p, rollouts) for p in range(first, min(prompts, first + batch_groups))
            ]
            items = [item for group in batch for item in group]
            r = http.post(f"{stack.amaris_url}/batch_score", json={"items": items})
            r.raise_for_status()
            results = r.json()["results"]
            assert all(x["status"] == "scored" for x in results), results
            listwise += sum(x.get("judge_mode") == "listwise" for x in results)
            for g in range(len(batch)):
                part = results[g * rollouts : (g + 1) * rollouts]
                half = rollouts - rollouts // 2
                groups.append([(i < half, float(x["score"])) for i, x in enumerate(part)])
        calls, prompt, completion = scorer_usage(http.get(f"{stack.amaris_url}/metrics").text)
    return Result(
        mode, prompts * rollouts, calls, prompt, completion, ordered_share(groups), listwise
    )


def table(results: list[Result]) -> str:
    lines = [
        "| mode | rollouts | judge calls | prompt tokens / rollout | completion tokens / rollout "
        "| right > wrong pairs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        prompt, completion = r.per_rollout
        lines.append(
            f"| {r.mode} | {r.rollouts} | {r.calls} | {prompt:.0f} | {completion:.0f} "
            f"| {100 * r.ordered_pairs:.0f}% |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--batch-groups", type=int, default=8, help="groups per /batch_score")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompts, args.rollouts, args.batch_groups = (
            SMOKE["prompts"],
            SMOKE["rollouts"],
            SMOKE["batch_groups"],
        )
    signal.signal(signal.SIGTERM, raise_interrupt)
    with work_folder("amaris-bench-groups-", None) as folder:
        results = [
            run_mode(mode, folder, args.prompts, args.rollouts, args.batch_groups) for mode in MODES
        ]
    shown = table(results)
    print(shown, flush=True)
    for r in results:
        print(f"{r.mode}: {r.listwise} of {r.rollouts} rollouts judged listwise", flush=True)
    out = report_path(args.out, args.smoke)
    if out is not None:
        point, listwise = results
        saved = 1 - sum(listwise.per_rollout) / sum(point.per_rollout)
        what = (
            f"Judge tokens per rollout (amaris's usage accounting; the offline judge reports a "
            f"quarter of the characters) scoring {args.prompts} GRPO groups of "
            f"{args.rollouts} (half right, half wrong) in `/batch_score`, each rollout judged "
            f"alone (pointwise) or each group in one call (`scoring.group_mode: listwise`): "
            f"{100 * saved:.0f}% fewer tokens a rollout listwise."
        )
        start, end = markers(NAME)
        write_doc(
            out,
            doc_section(
                NAME, "Group judging: listwise against pointwise", what, shown, script=__file__
            ),
            start,
            end,
        )
    return results


if __name__ == "__main__":
    main()
