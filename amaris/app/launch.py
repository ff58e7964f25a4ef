"""The start of ``amaris serve`` before Prefect is imported: signals, the Prefect server
child and its environment, the scheduled-repair worker.

Prefect reads its settings (``PREFECT_API_URL``, the auth string, ``PREFECT_HOME``, the
extra loggers it attaches its API log handler to) from the environment once, when it is
imported. So :func:`launched` runs first, in a process that has not imported Prefect, and
sets them; then the CLI imports :mod:`amaris.app.serve` (the wiring, Prefect) and serves.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amaris.app.prefect_env import configure_prefect
from amaris.app.prefect_server import PrefectServer, die_with_parent
from amaris.app.running import SERVICE_RECORD, drop_record, write_record
from amaris.logs import configure_logging
from amaris.private import check_tree, open_private, private_folder, restrict_umask
from amaris.redact import redact_url
from amaris.settings import Settings, secret_value

log = logging.getLogger("amaris")

WORKER_GRACE_S = 2.0
"""How long the repair worker has to exit on SIGTERM before it is killed: it holds no
state (its schedule and runs live in Prefect's server), and Prefect's runner may wait on
that server, which stops beside it."""


@dataclass
class Launch:
    """What :func:`launched` started: the signal handling, and the Prefect server child
    (None when ``PREFECT_API_URL`` names one)."""

    signals: _Signals
    server: PrefectServer | None


@contextmanager
def launched(settings: Settings) -> Iterator[Launch]:
    """Install the signal handling, start the Prefect server child (unless
    ``PREFECT_API_URL`` names one) with its environment set, and the repair worker; on
    exit, stop the children. A signal during start-up stops them there, exit code 0
    (:class:`_Signals`); a Prefect server child that does not answer, or dies, stops
    ``amaris serve`` with exit code 1.

    Everything the process tree creates is private (:func:`amaris.private.restrict_umask`),
    and the folders it writes into are checked first (:func:`private_folders`).

    Raises:
        UnsafeFolderError: a folder amaris writes into is another user's, or open to them.
    """
    signals = _Signals()
    signals.install()
    server: PrefectServer | None = None
    worker: RepairWorker | None = None
    try:
        restrict_umask()
        configure_logging(settings.logging.level, settings.logging.format)
        private_folders(settings)
        configure_prefect(settings)
        if not os.environ.get("PREFECT_API_URL"):
            server = PrefectServer(Path(os.environ["PREFECT_HOME"]), settings.prefect.port)
            signals.server = server
            server.start()
            server.watch(signals.fail)
            # The children (repair worker, its runs) inherit the address and the auth
            # string, and so does Prefect when this process imports it.
            os.environ.update(server.client_env())
            log.warning("Prefect UI: %s (step runs, task runs, artifacts)", server.url)
        else:
            log.warning("using the Prefect API at %s", redact_url(os.environ["PREFECT_API_URL"]))
        worker = signals.worker = RepairWorker(settings, server)
        worker.start_when_ready()
        # The commands that talk to this service find it here, on whatever port it got.
        record = Path(settings.memory.path) / SERVICE_RECORD
        write_record(record, pid=os.getpid(), url=settings.server.local_url)
        yield Launch(signals, server)
    finally:
        signals.stopping()
        _stop_children(worker, server)
        drop_record(Path(settings.memory.path) / SERVICE_RECORD)


def private_folders(settings: Settings) -> None:
    """Create the folders ``amaris serve`` writes into (0700), and refuse any that another
    user owns or may write to: the data folder and everything in it, the Prefect home, the
    log folder, the rubric export's folder.

    Raises:
        UnsafeFolderError: the first such folder (or planted entry), naming the fix.
    """
    data = Path(settings.memory.path)
    private_folder(data, narrow=True)
    check_tree(data)
    home = os.environ.get("PREFECT_HOME")
    prefect_home = private_folder(Path(home) if home else data / "prefect")
    if not prefect_home.resolve().is_relative_to(data.resolve()):
        check_tree(prefect_home)  # its results are unpickled, its logging.yml run
    for folder in (settings.log_dir, settings.memory.rubrics_export_path.parent):
        private_folder(folder)


def _stop_children(worker: RepairWorker | None, server: Any) -> None:
    """Stop the repair worker and the Prefect server side by side. Stopping the server
    also ends the threads still waiting for it to answer."""
    log.info("stopping the repair worker and the Prefect server")
    stopper = threading.Thread(target=worker.stop) if worker is not None else None
    if stopper is not None:
        stopper.start()
    if server is not None:
        server.stop()
    if stopper is not None:
        stopper.join()
    log.info("stopped")


class _Signals:
    """What SIGTERM and SIGINT do in ``amaris serve``.

    During start-up nothing has been served: the handler stops the children started so
    far and ends the process at once, exit code 0. It does not raise: an exception raised
    by a signal handler surfaces wherever the main thread is, and in a callback whose
    exceptions Python ignores (importlib's module-lock callback, for one) it is lost,
    the signal with it, and an import lock may be left behind. While serving, uvicorn
    handles the signals (drain, shutdown) and then re-raises the one it got: then the
    handler raises ``SystemExit(0)`` in plain code, through :func:`launched`'s ``finally``.
    Once stopping, further signals are ignored: they would cut the stopping short.
    """

    def __init__(self) -> None:
        self.server: Any = None
        self.worker: RepairWorker | None = None
        self.exit_code = 0
        self._serving = False
        self._stopping = False

    def fail(self, reason: str) -> None:
        """Stop ``amaris serve`` (exit code 1): the Prefect server child did not start or
        died, so no step can run. Called from a thread: the stop goes through SIGTERM."""
        log.error("%s; stopping amaris serve (no step can run without it)", reason)
        self.exit_code = 1
        os.kill(os.getpid(), signal.SIGTERM)

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def serving(self) -> None:
        """From now on uvicorn answers the signals first."""
        self._serving = True

    def stopping(self) -> None:
        """The process is stopping its children: ignore further signals."""
        self._stopping = True

    def _handle(self, signum: int, frame: object) -> None:
        if self._stopping:
            log.warning("signal %s: already stopping", signum)
            return
        self._stopping = True
        log.warning("signal %s: stopping", signum)
        if self._serving:
            raise SystemExit(self.exit_code)
        # One after the other: starting a thread here could wait forever on a lock the
        # interrupted main thread holds.
        if self.worker is not None:
            self.worker.stop()
        if self.server is not None:
            self.server.stop()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.exit_code)


class RepairWorker:
    """The child process serving the scheduled-repair deployment (``amaris repair-worker``)."""

    def __init__(self, settings: Settings, server: Any) -> None:
        self._settings = settings
        self._server = server
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = threading.Event()

    def start_when_ready(self) -> None:
        """Spawn the worker once the Prefect API answers (in a thread; never blocks)."""
        if self._settings.prefect.repair_interval_seconds is None:
            return
        threading.Thread(target=self._spawn, name="amaris-repair-worker", daemon=True).start()

    def _spawn(self) -> None:

        try:
            if self._server is not None:
                self._server.wait_ready()
        except RuntimeError as exc:
            log.error("no scheduled repair: %s", exc)
            return
        if self._stopped.is_set():
            return
        server = self._settings.server
        # The repair runs' only target is this service: its address and key reach them
        # through the environment (inherited by the runs' processes), never a parameter.
        env = dict(os.environ)
        env["AMARIS_REPAIR_URL"] = server.local_url
        key = secret_value(server.api_key)
        if key:
            env["AMARIS_API_KEY"] = key
        home = Path(os.environ["PREFECT_HOME"])
        with os.fdopen(open_private(home / "repair-worker.log"), "ab") as out:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "amaris.cli.main",
                    "repair-worker",
                    "--interval",
                    str(self._settings.prefect.repair_interval_seconds),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )
        log.info(
            "scheduled repair every %s s (pid %s)",
            self._settings.prefect.repair_interval_seconds,
            self._proc.pid,
        )
        # PR_SET_PDEATHSIG fires when the spawning *thread* ends: this thread must live
        # as long as the child is meant to.
        self._stopped.wait()

    def stop(self) -> None:
        """Stop the worker child."""
        self._stopped.set()
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(WORKER_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
