"""Mutation testing of the core modules with cosmic-ray, one module at a time.

    python -m bench.evaluations.mutation                      # every module in MODULES
    python -m bench.evaluations.mutation aggregate guardrails # a subset, by name

Each module is mutated against only the test files that exercise it (MODULES), in a
copy of the tracked files (``git ls-files``) under a temporary folder, so the worktree is
never edited; one mutant at a time (cosmic-ray's local distributor: one worker, the machine
is shared). Operators that only make noise for this code (bitwise and shift operators,
``**``, ``%``, ``//``) are filtered out. Prints, and writes to ``--out`` (default
``.mutation-last.json`` at the repository's root, git-ignored: generated output, kept out of
docs/), per module: mutants, killed, survived, timeouts, run time, and each survivor's line
and operator; docs/mutation.md keeps the scores.

    python -m bench.evaluations.mutation scorer --survivors-only  # after adding tests for survivors

``--survivors-only`` runs only the mutants that survived the module's last recorded run
(same operator, occurrence and line; the module must be unchanged since) and carries the
other outcomes over: the "after" figure of a triage without running every mutant again.

    python -m bench.evaluations.mutation transport --workers 3  # three mutants at a time

``--workers N`` splits a module's mutants between N processes, each in its own copy of the
tree (:func:`exec_split`), for a loaded machine where one worker would take hours.

    python -m bench.evaluations.mutation --smoke --out /tmp/mutation.json  # one mutant

``--smoke`` runs one mutant of :data:`SMOKE_MODULE` (or of the one module named), the others
skipped: every step of a run, in seconds; written only to an ``--out`` given.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cosmic_ray.work_db import use_db  # type: ignore[import-untyped]
from cosmic_ray.work_item import WorkerOutcome, WorkResult  # type: ignore[import-untyped]

from bench._common import console_script

ROOT = Path(__file__).resolve().parents[2]

MODULES: dict[str, tuple[str, list[str]]] = {
    "aggregate": ("amaris/rubric/aggregate.py", ["tests/rubric/test_aggregate.py"]),
    "guardrails": ("amaris/rubric/guardrails.py", ["tests/rubric/test_guardrails.py"]),
    "reward": ("amaris/scoring/reward.py", ["tests/scoring/test_reward.py"]),
    "scorer": ("amaris/scoring/scorer.py", ["tests/scoring/test_scorer.py"]),
    "verdicts": ("amaris/scoring/verdicts.py", ["tests/scoring/test_verdicts.py"]),
    # rubric_store, step_lifecycle: fixture-free unit files (--noconftest); the conftest
    # files (test_rubric_store.py, test_step_*.py) still cover these modules in the suite.
    "rubric_store": ("amaris/rubric/store.py", ["tests/rubric/test_rubric_store_unit.py"]),
    "step_lifecycle": (
        "amaris/steps/coordinator.py",
        ["tests/pipeline/test_step_lifecycle_unit.py"],
    ),
    # the embedded default backend (the interface is amaris/memory/rollout_log.py): a
    # fixture-free unit file; tests/memory/test_rollout_log.py and test_sqlite_rollout_log.py
    # (conftest, Qdrant folders, the app) still cover it in the suite.
    "rollout_log": (
        "amaris/memory/sqlite_rollout_log.py",
        ["tests/memory/test_sqlite_rollout_log_unit.py"],
    ),
    # auth, adapters, memory_retrieval: fixture-free unit files (--noconftest); the
    # slower end-to-end files (test_api_edge.py, test_integrations_*.py,
    # test_pipeline_modes.py) still cover these modules in the suite.
    "auth": ("api/middleware.py", ["tests/api/test_auth_unit.py"]),
    "adapters": ("amaris/client/rewards.py", ["tests/trainers/test_adapters_unit.py"]),
    "adapter_clients": (
        "amaris/integrations/_clients.py",
        ["tests/trainers/test_adapters_unit.py"],
    ),
    "memory_retrieval": (
        "tasks/retrieve_memory.py",
        ["tests/memory/test_memory_retrieval_unit.py"],
    ),
    "offline_rules": ("amaris/offline/heuristics.py", ["tests/offline/test_offline_rules.py"]),
    # precheck, parsing, scale (fixture-free unit files, --noconftest; the app's
    # files, tests/trust/test_precheck.py, tests/api/test_judge_replies.py, still cover them)
    "precheck": (
        "amaris/trust/precheck.py",
        ["tests/trust/test_precheck_unit.py", "tests/trust/test_precheck_head.py"],
    ),
    "json_reply": ("amaris/llm/json_reply.py", ["tests/llm/test_json_reply_unit.py"]),
    "judge_protocol": (
        "amaris/scoring/judge_protocol.py",
        ["tests/trust/test_judge_protocol_unit.py"],
    ),
    "rollout_records": ("amaris/memory/records.py", ["tests/memory/test_rollout_records_unit.py"]),
    # gateway: fixture-free files, the endpoint faked at the gateway seam
    # (tests/support/scripted_llm.py); test_gateway*.py (conftest, the fake LLM over HTTP)
    # still cover these modules in the suite.
    "gateway": (
        "amaris/llm/gateway.py",
        ["tests/llm/test_gateway_unit.py", "tests/llm/test_gateway_attempt_unit.py"],
    ),
    "attempt": ("amaris/llm/attempt.py", ["tests/llm/test_gateway_attempt_unit.py"]),
    # trl/openrlhf (fixture-free files, --noconftest; the contract files
    # tests/trainers/test_contract_{trl,openrlhf}.py and test_integrations_*.py, TRL's and
    # OpenRLHF's own code against the real server, still cover them in the suite).
    # prompt_split is /get_reward's prompt/response split, moved out of api/routes/openrlhf.py.
    "trl": ("amaris/integrations/trl.py", ["tests/trainers/test_trl_adapter_unit.py"]),
    "trl_rewards": (
        "amaris/integrations/trl_rewards.py",
        ["tests/trainers/test_trl_rewards_unit.py"],
    ),
    "openrlhf": (
        "amaris/integrations/openrlhf.py",
        ["tests/trainers/test_openrlhf_adapter_unit.py"],
    ),
    "prompt_split": ("amaris/text/prompt_split.py", ["tests/text/test_prompt_split.py"]),
    # verl: fixture-free files (--noconftest); test_integrations_verl.py and the
    # trainer-contract files (test_contract_verl*.py) still cover both in the suite.
    "verl": ("amaris/integrations/verl.py", ["tests/trainers/test_verl_unit.py"]),
    "verl_manager": (
        "amaris/integrations/verl_manager.py",
        ["tests/trainers/test_verl_manager_unit.py"],
    ),
    # the judge's HTTP client, output fitting and /get_reward (fixture-free files,
    # --noconftest; test_transport_fake_llm.py, the output files with conftest and the
    # OpenRLHF contract files still cover them in the suite).
    "transport": (
        "amaris/llm/transport.py",
        ["tests/llm/test_transport_edges.py", "tests/llm/test_transport.py"],
    ),
    "openrlhf_route": ("api/routes/openrlhf.py", ["tests/api/test_get_reward_unit.py"]),
    # test_output_fit_gateway.py (the fake LLM over HTTP, conftest) also covers it in the suite
    "output_fit": ("amaris/llm/output_fit.py", ["tests/llm/test_output_fit.py"]),
}

NO_CONFTEST = {"aggregate", "guardrails", "offline_rules", "verdicts", "scorer", "reward"}
NO_CONFTEST |= {"auth", "adapters", "adapter_clients", "memory_retrieval"}
NO_CONFTEST |= {"rollout_log", "rubric_store", "step_lifecycle"}
NO_CONFTEST |= {"precheck", "json_reply", "judge_protocol", "rollout_records"}
NO_CONFTEST |= {"gateway", "attempt"}
NO_CONFTEST |= {"trl", "trl_rewards", "openrlhf", "prompt_split"}
NO_CONFTEST |= {"verl", "verl_manager"}
NO_CONFTEST |= {
    "transport",
    "openrlhf_route",
    "output_fit",
}
"""Modules whose tests need no fixture of tests/conftest.py: pytest starts several times
faster without it (the conftest imports Prefect), and start-up is most of a mutant's cost."""

UNUSED_PLUGINS = ["hydra_pytest", "benchmark", "hypothesispytest", "anyio"]
"""pytest plugins installed in the venv (hydra, pytest-benchmark, hypothesis, anyio) that no
file mapped in ``MODULES`` uses: not loaded by the fixture-free runs."""

EXCLUDED_OPERATORS = [
    r".*_(BitOr|BitAnd|BitXor|LShift|RShift|Pow|Mod|FloorDiv)(_.*)?$",
    r".*ReplaceBinaryOperator_.*_(Pow|Mod|FloorDiv|BitOr|BitAnd|BitXor|LShift|RShift)$",
]


def config(module: str, tests: list[str], timeout: float, conftest: bool) -> str:
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    if conftest:
        pytest += ["-n", "0"]
    else:  # no xdist, no conftest: "-o addopts=" drops pyproject's "-n 2"
        pytest += ["-o", "addopts=", "-p", "no:xdist", "--noconftest"]
        # Nor the plugins no mapped file uses: their loading is a large share of a
        # fixture-free mutant's CPU.
        for plugin in UNUSED_PLUGINS:
            pytest += ["-p", f"no:{plugin}"]
    command = " ".join([*pytest, *tests])
    excluded = ", ".join(json.dumps(p) for p in EXCLUDED_OPERATORS)
    return (
        "[cosmic-ray]\n"
        f'module-path = "{module}"\n'
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f'test-command = "{command}"\n\n'
        '[cosmic-ray.distributor]\nname = "local"\n\n'
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = [{excluded}]\n"
    )


def copy_tree(target: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in filter(None, files):
        source, copy = ROOT / raw.decode(), target / raw.decode()
        if source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)


CARRIED = "carried over: not a survivor of the last run"
SMOKE_MODULE = "aggregate"
SMOKED = "not run: a smoke run runs one mutant"


def keep_only(session: Path, survivors: list[dict[str, Any]]) -> None:
    """Mark every mutant of ``session`` but the last run's ``survivors`` as done (a result
    with the output :data:`CARRIED`), through cosmic-ray's work-db API as its filters do.

    Raises:
        SystemExit: a survivor is not among the mutants: the module changed since.
    """
    wanted = {(s["operator"], s["occurrence"], s["line"]) for s in survivors}
    found = set()
    with use_db(str(session)) as db:
        for item in list(db.pending_work_items):
            (mutation,) = item.mutations
            spec = (mutation.operator_name, mutation.occurrence, mutation.start_pos[0])
            if spec in wanted:
                found.add(spec)
            else:
                db.set_result(
                    item.job_id, WorkResult(output=CARRIED, worker_outcome=WorkerOutcome.SKIPPED)
                )
    if found != wanted:
        raise SystemExit(f"not found, the module changed since the last run: {wanted - found}")


def keep_first(session: Path) -> None:
    """Mark every pending mutant of ``session`` but the first as done (a result with the
    output :data:`SMOKED`)."""
    with use_db(str(session)) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
        db.set_multiple_results(
            pending[1:], WorkResult(output=SMOKED, worker_outcome=WorkerOutcome.SKIPPED)
        )


OTHER_WORKER = "run by another worker"


def exec_split(cr: list[str], cfg: Path, session: Path, work: Path, workers: int) -> None:
    """``cosmic-ray exec`` of ``session``'s pending mutants by ``workers`` processes side by
    side, each in its own copy of the tree (a mutant is written into the module's file) and
    of the session holding every ``workers``-th mutant; their results merged back."""
    with use_db(str(session)) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
    shares = [set(pending[k::workers]) for k in range(workers)]
    runs = []
    for k, share in enumerate(shares):
        tree = work / f"worker-{k}"
        copy_tree(tree)
        part = tree / session.name
        shutil.copy2(session, part)
        with use_db(str(part)) as db:
            others = [job for job in pending if job not in share]
            db.set_multiple_results(
                others, WorkResult(output=OTHER_WORKER, worker_outcome=WorkerOutcome.SKIPPED)
            )
        runs.append(subprocess.Popen([*cr, "exec", str(cfg), str(part)], cwd=tree))
    if any(run.wait() != 0 for run in runs):
        raise SystemExit("cosmic-ray exec failed in a worker")
    with use_db(str(session)) as db:
        for k, share in enumerate(shares):
            with use_db(str(work / f"worker-{k}" / session.name)) as part_db:
                for job_id, result in part_db.results:
                    if job_id in share:
                        db.set_result(job_id, result)


def run_module(
    name: str,
    work: Path,
    timeout: float,
    last: dict[str, Any] | None = None,
    workers: int = 1,
    smoke: bool = False,
) -> dict[str, Any]:
    """Mutate module ``name``; with ``last`` (its previous result), only that run's survivors;
    ``workers`` processes side by side (:func:`exec_split`); with ``smoke``, one mutant."""
    module, tests = MODULES[name]
    cfg, session = work / f"{name}.toml", work / f"{name}.sqlite"
    cfg.write_text(config(module, tests, timeout, conftest=name not in NO_CONFTEST))
    cr = [console_script("cosmic-ray")]
    started = time.monotonic()
    subprocess.run([*cr, "init", str(cfg), str(session)], cwd=work, check=True)
    subprocess.run(
        [console_script("cr-filter-operators"), str(session), str(cfg)],
        cwd=work,
        check=True,
    )
    if last is not None:
        keep_only(session, last["survivors"])
    if smoke:
        keep_first(session)
    subprocess.run([*cr, "baseline", str(cfg)], cwd=work, check=True)
    if workers > 1:
        exec_split(cr, cfg, session, work, workers)
    else:
        subprocess.run([*cr, "exec", str(cfg), str(session)], cwd=work, check=True)
    dump = subprocess.run(
        [*cr, "dump", str(session)], cwd=work, capture_output=True, text=True, check=True
    ).stdout
    outcomes: dict[str, int] = {}
    survivors = []
    for line in filter(None, dump.splitlines()):
        item, result = json.loads(line)
        if result is None:
            outcome = "pending"
        elif result.get("output") == CARRIED:
            outcome = "carried"
        elif result.get("output") == SMOKED:
            outcome = "smoke-skipped"
        elif result["worker_outcome"] != "normal":
            outcome = result["worker_outcome"]  # "abnormal" / "exception": counted apart
        else:
            outcome = result["test_outcome"]  # killed / survived / incompetent
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "survived":
            for mutation in item["mutations"]:
                survivors.append(
                    {
                        "line": mutation["start_pos"][0],
                        "operator": mutation["operator_name"],
                        "occurrence": mutation["occurrence"],
                        "diff": result.get("diff", ""),
                    }
                )
    rerun = None
    if last is not None:  # the last run's outcomes, its survivors replaced by this run's
        rerun = {k: n for k, n in outcomes.items() if k not in ("carried", "skipped")}
        carried = dict(last["outcomes"])
        carried["survived"] = carried.get("survived", 0) - len(last["survivors"])
        outcomes = {k: carried.get(k, 0) + rerun.get(k, 0) for k in {*carried, *rerun}}
        rerun["of"] = len(last["survivors"])
    killed, survived = outcomes.get("killed", 0), outcomes.get("survived", 0)
    return {
        "module": module,
        "tests": tests,
        "mutants": sum(outcomes.values()),
        "outcomes": outcomes,
        "score": round(killed / (killed + survived), 3) if killed + survived else None,
        "seconds": round(time.monotonic() - started),
        "survivors": survivors,
        **({"survivors_rerun": rerun} if rerun is not None else {}),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", help=f"of: {', '.join(MODULES)}")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument(
        "--out", type=Path, help="default .mutation-last.json; with --smoke, none (printed only)"
    )
    parser.add_argument(
        "--survivors-only",
        action="store_true",
        help="run only the mutants that survived the last recorded run, carry the rest over",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="mutants run side by side, each worker in its own copy of the tree (default 1)",
    )
    parser.add_argument("--smoke", action="store_true", help="one mutant of one module")
    args = parser.parse_args(argv)
    if args.smoke and len(args.modules) > 1:
        parser.error("--smoke: one module at most")
    names = args.modules or ([SMOKE_MODULE] if args.smoke else list(MODULES))
    out = args.out or (None if args.smoke else ROOT / ".mutation-last.json")
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {list(MODULES)}")
    results = json.loads(out.read_text()) if out is not None and out.exists() else {}
    with tempfile.TemporaryDirectory(prefix="amaris-mutation-") as tmp:
        work = Path(tmp)
        copy_tree(work)
        for name in names:
            last = results.get(name) if args.survivors_only else None
            if args.survivors_only and last is None:
                parser.error(f"--survivors-only: no last run of {name} in {out}")
            result = run_module(name, work, args.timeout, last, args.workers, args.smoke)
            results[name] = result
            if out is not None:
                out.write_text(json.dumps(results, indent=1) + "\n")
            print(
                f"{name}: {result['module']} mutants={result['mutants']} "
                f"outcomes={result['outcomes']} score={result['score']} {result['seconds']} s",
                flush=True,
            )
            for s in result["survivors"]:
                print(f"  survived: line {s['line']} {s['operator']}", flush=True)


if __name__ == "__main__":
    main()
