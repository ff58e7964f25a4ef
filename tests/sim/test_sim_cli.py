"""``amaris simulate`` / ``replay`` / ``export``: bad arguments and inputs are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amaris.cli.commands.simulate import sized
from amaris.cli.main import build_parser, main
from amaris.cli.simulate import run_title


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["simulate", "--steps", "0"], "argument --steps: 0 is below 1"),
        (
            ["simulate", "--rollouts-per-step", "2000"],
            "argument --rollouts-per-step: 2000 is above",
        ),
        (["simulate", "--rollouts-per-step", "many"], "argument --rollouts-per-step: invalid"),
        (["simulate", "--learning-rate", "-1"], "argument --learning-rate: -1 is below 0"),
        (["simulate", "--seed", "x"], "argument --seed: invalid int value"),
        (
            ["replay", "r.jsonl", "--modes", "none,dynamc"],
            "argument --modes: unknown memory mode 'dynamc' (known: none, static, dynamic, both)",
        ),
        (
            ["replay", "r.jsonl", "--modes", "both,both"],
            "argument --modes: a memory mode is repeated",
        ),
    ],
)
def test_argument_errors_name_the_argument(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_replay_needs_rollouts_or_a_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay"]) == 2
    assert "ROLLOUTS.jsonl (or --manifest of a simulate run) is needed" in capsys.readouterr().err


def test_replay_refuses_a_manifest_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "manifest.json"
    assert main(["replay", "--manifest", str(missing)]) == 2
    assert f"--manifest {missing}:" in capsys.readouterr().err
    missing.write_text(json.dumps({"kind": "serve"}))
    assert main(["replay", "--manifest", str(missing)]) == 2
    assert "config: missing" in capsys.readouterr().err
    missing.write_text(json.dumps({"config": {"server": {"port": "x"}}}))
    assert main(["replay", "--manifest", str(missing)]) == 2
    assert "server.port" in capsys.readouterr().err
    missing.write_text(json.dumps({"config": {}}))
    assert main(["replay", "--manifest", str(missing)]) == 2
    assert "names no rollouts file" in capsys.readouterr().err


def test_replay_refuses_a_manifest_whose_run_fields_it_would_copy_are_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # run_id, config_hash and seed go into the replay's own manifest as they are: one of
    # another type is named, not copied (nor the run taken on to the rollouts).
    manifest = tmp_path / "manifest.json"
    for field, value in (("run_id", 7), ("config_hash", ["x"]), ("seed", "3")):
        body = {"config": {}, field: value, "extra": {"rollouts": "r.jsonl"}}
        manifest.write_text(json.dumps(body))
        assert main(["replay", "--manifest", str(manifest)]) == 2
        assert f"--manifest {manifest}: {field}: Input should be a valid" in (
            capsys.readouterr().err
        )


def test_replay_input_errors_name_the_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["replay", "missing.jsonl"]) == 2
    assert "ROLLOUTS: missing.jsonl: cannot read" in capsys.readouterr().err

    good = {"step": 0, "rollout": {"id": "r1", "input": "What is 2 + 2?", "output": "4"}}
    bad = {"step": -1, "rollout": {"id": "r2", "input": "What is 2 + 3?"}}
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(good) + "\n\n" + json.dumps(bad) + "\n")
    assert main(["replay", str(records)]) == 2
    err = capsys.readouterr().err
    assert f"{records} line 3:" in err
    assert "step: Input should be greater than or equal to 0" in err
    assert "rollout.output: Field required" in err

    late = tmp_path / "late.jsonl"
    late.write_text(json.dumps({**good, "late": True}) + "\n")
    assert main(["replay", str(late)]) == 2
    assert "no rollout to replay" in capsys.readouterr().err
    assert not (tmp_path / "replay-report").exists()


@pytest.mark.parametrize(
    ("label", "title"),
    [
        ("simulate", "simulate"),
        ("dynamic", "simulate dynamic"),
        ("judge-drift", "simulate judge-drift"),
    ],
)
def test_a_run_is_named_once(label: str, title: str) -> None:
    assert run_title(label) == title


@pytest.mark.parametrize(
    ("argv", "size"),
    [
        (["simulate"], (10, 32)),
        (["simulate", "--scenario", "steady"], (10, 32)),
        (["simulate", "--scenario", "cascade"], (16, 64)),
        (["simulate", "--scenario", "cascade", "--steps", "3"], (3, 64)),
        (["simulate", "--scenario", "cascade", "--rollouts-per-step", "8"], (16, 8)),
    ],
)
def test_a_run_is_sized_by_its_options_else_its_scenario(
    argv: list[str], size: tuple[int, int]
) -> None:
    args = sized(build_parser().parse_args(argv))
    assert (args.steps, args.rollouts_per_step) == size
