"""The Prefect API server ``amaris serve`` runs beside itself when none is configured.

Only a real Prefect server schedules deployments (the repair schedule) and serves
the UI on the run's history; its home and database live under the data folder.
It is a child process that dies with amaris, even on ``kill -9`` (Linux
``PR_SET_PDEATHSIG``).

It requires credentials: a random auth string kept in ``<Prefect home>/auth-string``
(mode 0600), which Prefect checks on every API call (``PREFECT_SERVER_API_AUTH_STRING``)
and its clients send (``PREFECT_API_AUTH_STRING``). It allows its own UI's origin only
(CORS) and answers only to a loopback ``Host`` (:mod:`amaris.app.prefect_app`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from amaris.app.running import live_record, write_record
from amaris.private import UnsafeFolderError, check_file, open_private, private_folder
from amaris.readiness import wait_ok

log = logging.getLogger("amaris.prefect")

_PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 3.0
"""How long the server has to stop on SIGTERM before it is killed."""

READY_TIMEOUT_S = 300.0
"""How long the server child has to answer before ``amaris serve`` gives up: a first start
creates its database (migrations), which is slow on a loaded machine."""

AUTH_FILE = "auth-string"
"""The file under the Prefect home holding the server's auth string."""

_SECRETS_NOT_FOR_PREFECT = ("AMARIS_API_KEY", "OPENAI_API_KEY")
"""Keys in amaris's environment the Prefect server has no use for: it does not get them."""


def die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the server is still stopped on a normal shutdown


SERVER_RECORD = "amaris-server.json"
"""The Prefect server child's record (pid, UI and API addresses) in its home."""


class PrefectServerError(RuntimeError):
    """The Prefect server child did not start, or died: the step path cannot run."""


def listening_socket(port: int | None) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` (a free port if None or taken).

    It listens from the moment it is bound, without ``SO_REUSEADDR``/``SO_REUSEPORT``:
    from then on no other socket can bind that address, and every connection to it reaches
    this socket and, through the descriptor it hands down, amaris's own server child.
    Accepted connections inherit ``TCP_NODELAY`` from it: uvicorn's loop does not set it,
    and an answer written in two segments would wait on the client's delayed ACK.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(("127.0.0.1", port or 0))
        except OSError as exc:
            if not port:
                raise
            log.warning("Prefect port %s is taken (%s): using a free one", port, exc.strerror)
            sock.close()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def ensure_auth_string(home: Path) -> str:
    """The auth string of the Prefect server under ``home``, created on first use.

    ``amaris:`` and 256 random bits, in a file only its owner can read or write. It is
    written to a private temporary file, then linked into place, so a reader never sees
    a partial file and two processes starting at once agree on one secret.

    Raises:
        UnsafeFolderError: the file is a symlink, or another user's.
    """
    private_folder(home)
    path = home / AUTH_FILE
    if not path.exists() and not path.is_symlink():
        scratch = home / f".{AUTH_FILE}.{os.getpid()}"
        scratch.unlink(missing_ok=True)
        fd = open_private(scratch, append=False)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(f"amaris:{secrets.token_urlsafe(32)}\n")
            with contextlib.suppress(FileExistsError):  # another process's secret won
                os.link(scratch, path)
        finally:
            scratch.unlink(missing_ok=True)
    secret = read_auth_string(home)
    if secret is None:
        raise RuntimeError(f"{path} is empty: delete it to get a new auth string")
    return secret


def read_auth_string(home: Path) -> str | None:
    """The auth string of the Prefect server under ``home``; None when it has none.

    Never through a symlink, and only from a file of amaris's user: a secret another user
    wrote is one they know. A file others can read has its permissions narrowed to 0600.

    Raises:
        UnsafeFolderError: the file is a symlink, not a regular file, or another user's.
    """
    path = home / AUTH_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise UnsafeFolderError(f"{path} is a symlink: remove it") from exc
        raise
    check_file(fd, path)
    with os.fdopen(fd, encoding="utf-8") as handle:
        if os.fstat(handle.fileno()).st_mode & 0o077:
            log.warning("%s was readable by other users; now 0600", path)
            os.fchmod(handle.fileno(), 0o600)
        secret = handle.read().strip()
    return secret or None


class PrefectServer:
    """The Prefect API and UI as one child process bound to 127.0.0.1.

    It runs amaris's factory of Prefect's app under uvicorn directly: ``prefect server
    start`` would fork uvicorn as a grandchild, which outlives a killed parent. amaris
    binds the listening socket itself (:func:`listening_socket`) and hands it to the child
    (uvicorn's ``--fd``); it keeps its own copy open until :meth:`stop`, so the port is
    never free while this object lives: whatever answers there is this child, and the
    auth string goes nowhere else.
    """

    def __init__(self, home: Path, port: int | None = None) -> None:
        self.home = home
        self.auth_string = ensure_auth_string(home)
        self._socket = listening_socket(port)
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api"
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = threading.Event()
        self._ready = threading.Event()

    def client_env(self) -> dict[str, str]:
        """The environment that points a Prefect client (this process, a child) here."""
        return {"PREFECT_API_URL": self.api_url, "PREFECT_API_AUTH_STRING": self.auth_string}

    def start(self) -> None:
        """Spawn the server (it takes seconds to answer; see :meth:`wait_ready`)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"PREFECT_API_URL", *_SECRETS_NOT_FOR_PREFECT}
        }
        env.update(
            {
                "PREFECT_HOME": str(self.home),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "PREFECT_SERVER_API_AUTH_STRING": self.auth_string,
                "PREFECT_SERVER_API_HOST": "127.0.0.1",
                "PREFECT_SERVER_API_PORT": str(self.port),
                "PREFECT_UI_API_URL": self.api_url,
                # The UI's own origin, under both loopback names; no other web page.
                "PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS": f"{self.url},http://localhost:{self.port}",
            }
        )
        fd = self._socket.fileno()
        with os.fdopen(open_private(self.home / "server.log"), "ab") as log_file:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "amaris.app.prefect_app:create_guarded_app",
                    "--fd",
                    str(fd),
                    "--log-level",
                    "warning",
                    "--lifespan",
                    "on",
                ],
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(fd,),
                # Out of the terminal's process group: Ctrl-C reaches amaris, which stops
                # the child itself (a child that stops on its own means a failure).
                start_new_session=True,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )
        write_record(
            self.home / SERVER_RECORD, pid=self._proc.pid, url=self.url, api_url=self.api_url
        )
        log.info("Prefect server starting on %s (pid %s)", self.url, self._proc.pid)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until the child answers ``/api/health``; return at once when :meth:`stop`
        is called.

        Only the child can answer: this object holds the port (see the class).

        Raises:
            PrefectServerError: the child exited, was stopped, or did not answer in time.
        """
        if self._ready.is_set():
            return
        # /health needs no credentials (Prefect's choice, for probes)
        health = f"{self.api_url}/health"
        if not wait_ok(health, self._check_alive, timeout, 0.25, pause=self._stopped.wait):
            raise PrefectServerError(
                f"Prefect server did not answer within {timeout} s; see {self.home / 'server.log'}"
            )
        self._ready.set()

    def _check_alive(self) -> None:
        if self._stopped.is_set():
            raise PrefectServerError("Prefect server stopped before it answered")
        proc = self._proc
        if proc is None:
            raise PrefectServerError("Prefect server not started")
        if proc.poll() is not None:
            raise PrefectServerError(
                f"Prefect server exited with {proc.returncode}; see {self.home / 'server.log'}"
            )

    def watch(self, on_failure: Callable[[str], None]) -> None:
        """Call ``on_failure(reason)`` (in a thread) if the child does not answer, or exits
        before :meth:`stop`: the step path cannot run without it."""

        def run() -> None:
            try:
                self.wait_ready()
                proc = self._proc
                if proc is not None:
                    proc.wait()
                self._check_alive()
            except PrefectServerError as exc:
                if not self._stopped.is_set():
                    on_failure(str(exc))

        threading.Thread(target=run, name="amaris-prefect-watch", daemon=True).start()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the child: SIGTERM, then SIGKILL after ``timeout``; :meth:`wait_ready`
        callers return at once. The port is released last."""
        self._stopped.set()
        proc, self._proc = self._proc, None
        try:
            if proc is None or proc.poll() is not None:
                return
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning(
                    "Prefect server (pid %s) still running %s s after SIGTERM; killing it",
                    proc.pid,
                    timeout,
                )
                proc.kill()
                proc.wait(5)
        finally:
            (self.home / SERVER_RECORD).unlink(missing_ok=True)
            self._socket.close()


def recorded_server(home: Path) -> dict[str, str] | None:
    """The server a running ``amaris serve`` recorded under ``home`` (for ``amaris ui``);
    None when there is none or its process is gone."""
    return live_record(home / SERVER_RECORD)
