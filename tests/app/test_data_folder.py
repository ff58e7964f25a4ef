"""The data folder is amaris's alone: what another user of the machine plants
there is refused, not loaded, followed or adopted; what amaris writes there they cannot read.

The slow test plants as another user would: a process of uid 65534 (``setpriv``; CI runs
as root) prepares the data folder before ``amaris serve`` starts. The others check each
control on its own. The modes of everything ``amaris serve`` and its Prefect server write
are checked in tests/app/test_prefect_security.py (one serve for both).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from amaris.app.prefect_env import configure_prefect
from amaris.app.prefect_server import AUTH_FILE, ensure_auth_string
from amaris.app.running import free_port
from amaris.llm.call_log import CallLog
from amaris.settings import load_settings
from tests.support.procs import AMARIS, NOBODY, amaris_env, require_slow

OTHER_UID = 65534

PLANT = """
import os, sys, pathlib
data, kind, target = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
data.mkdir(exist_ok=True)
if kind == "logging.yml":
    (data / "prefect").mkdir()
    (data / "prefect" / "logging.yml").write_text(
        "version: 1\\n"
        "disable_existing_loggers: false\\n"
        "handlers:\\n"
        "  planted:\\n"
        "    '()': subprocess.call\\n"
        f"    args: [touch, {target}]\\n"
    )
elif kind == "auth-string":
    (data / "prefect").mkdir()
    (data / "prefect" / "auth-string").write_text("amaris:known-to-uid-65534\\n")
elif kind == "llm_calls.jsonl":
    (data / "logs").mkdir()
    os.symlink(target, data / "logs" / "llm_calls.jsonl")
"""
"""Run as uid 65534: plants one thing in the data folder (creating the folder if it can)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("planted", "folder"),
    [
        ("logging.yml", "theirs"),
        ("auth-string", "theirs"),
        ("llm_calls.jsonl", "theirs"),
        ("logging.yml", "ours, writable by all"),
    ],
)
def test_serve_refuses_a_data_folder_another_user_could_plant_in(
    tmp_path: Path, planted: str, folder: str
) -> None:
    # A place every user can write to, like /tmp; the data folder's name is predictable.
    data = Path("/tmp") / f"amaris-data-{uuid.uuid4().hex}"
    ran = tmp_path / "ran-as-amaris"  # only amaris's user can create it
    secret = tmp_path / "secret-of-amaris-user"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    target = {"logging.yml": ran, "llm_calls.jsonl": secret}.get(planted, ran)
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(data), "embedding_model": "hashing"},
                "server": {"port": port},
                "prefect": {"port": free_port()},
            }
        )
    )
    require_slow("amaris serve")
    try:
        if folder != "theirs":
            data.mkdir()
            data.chmod(0o777)
        subprocess.run(
            [*NOBODY, sys.executable, "-c", PLANT, str(data), planted, str(target)], check=True
        )
        log = tmp_path / "serve.log"
        with log.open("wb") as out:
            serve = subprocess.Popen(
                [*AMARIS, "serve", "--config", str(config)],
                cwd=tmp_path,
                env=amaris_env(unset=("PREFECT_HOME",)),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        served = False
        try:
            while serve.poll() is None and not served:
                try:
                    served = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).is_success
                except httpx.HTTPError:
                    time.sleep(0.2)  # polling, as tests.support.procs.wait_http does
        finally:
            if serve.poll() is None:
                serve.terminate()
                serve.wait(30)
        text = log.read_text(errors="replace")
        assert not served, f"amaris serve ran on a data folder uid {OTHER_UID} prepared:\n{text}"
        assert serve.returncode == 2, text
        fix = "chown" if folder == "theirs" else "chmod go-w"
        assert f"amaris: {data} " in text and fix in text, text
        assert not ran.exists(), "the planted logging.yml ran a command as amaris's user"
        assert secret.read_text() == "secret\n"
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_the_call_log_does_not_follow_a_symlink(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "llm_calls.jsonl").symlink_to(secret)
    with pytest.raises(PermissionError, match=re.escape("llm_calls.jsonl is a symlink")):
        CallLog(logs).close()
    assert secret.read_text() == "secret\n"


def test_the_call_log_is_created_private(tmp_path: Path) -> None:
    log = CallLog(tmp_path / "logs")
    log.write({"agent": "scorer"})
    log.close()
    assert stat.S_IMODE((tmp_path / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "logs" / "llm_calls.jsonl").stat().st_mode) == 0o600


def test_an_auth_string_another_user_wrote_is_not_adopted(tmp_path: Path) -> None:
    home = tmp_path / "prefect"
    home.mkdir(mode=0o700)
    planted = home / AUTH_FILE
    planted.write_text("amaris:known-to-them\n")
    planted.chmod(0o600)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(
        PermissionError, match=re.escape(f"{AUTH_FILE} is not a regular file of amaris")
    ):
        ensure_auth_string(home)
    planted.unlink()
    (home / AUTH_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PermissionError, match="is a symlink"):
        ensure_auth_string(home)


@pytest.mark.parametrize("name", ["logging.yml", "profiles.toml"])
def test_prefect_loads_nothing_another_user_put_in_its_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    settings = load_settings(None, **{"memory.path": str(tmp_path / "data")})
    home = tmp_path / "data" / "prefect"
    home.mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("PREFECT_HOME", str(home))
    for variable in ("PREFECT_LOGGING_CONFIG_PATH", "PREFECT_LOGGING_SETTINGS_PATH"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    planted = home / name
    planted.write_text("version: 1\n")
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(PermissionError, match=re.escape(f"{planted} is not amaris's user's alone")):
        configure_prefect(settings)
    os.chown(planted, os.geteuid(), os.getegid())
    planted.chmod(0o666)
    with pytest.raises(PermissionError, match="chmod go-w"):
        configure_prefect(settings)
    planted.chmod(0o644)
    configure_prefect(settings)  # the user's own file, which only they can change
