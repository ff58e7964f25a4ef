"""Helpers shared by the benchmark scripts of this folder.

The scripts run from the repository root as modules, ``.venv/bin/python -m
bench.<group>.<name>`` (groups: ``performance``, ``probes``, ``evaluations``), and import this
module as ``bench._common`` and the tests' helpers from ``tests.support``.

Here: the subprocesses a benchmark owns (started in their own session, stopped by PID:
terminate, then kill, with whatever they left in their session; free ports, session PIDs and
stopping them are :mod:`amaris.app.running`'s), their CPU time from ``/proc``, waiting for
HTTP readiness and for idleness, percentiles, the machine and the command line for a report,
and writing one benchmark's marked section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import httpx
import httpx2
import yaml

from amaris.app.running import free_port, proc_stat, session_pids, stop_session

ROOT = Path(__file__).resolve().parent.parent
DOC_INTRO = (
    "# Benchmarks\n\n"
    "Figures measured on this machine (2 cores), with the command that produced them.\n"
)
API_KEY = "bench"
STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
SETTLE_TIMEOUT_S = 60.0
SETTLE_IDLE_CPU = 0.05
"""Share of one core under which a freshly started server counts as idle."""

QUESTION = "A shop sells pencils at 3 for 45 cents. How much do 7 pencils cost, in cents?"
REFERENCE = "105"

PY_SPY_FORMATS = {".json": "chrometrace", ".svg": "flamegraph", ".speedscope": "speedscope"}
"""py-spy output format by the suffix of ``--py-spy FILE``; raw stacks otherwise."""


# -- HTTP client ---------------------------------------------------------------------------
class ResponseLike(Protocol):
    """What the benchmarks read of an ``httpx``/``httpx2`` response."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    @property
    def headers(self) -> Any: ...

    def json(self, **kwargs: Any) -> Any: ...


class ClientLike(Protocol):
    """What the benchmarks use of an ``httpx``/``httpx2`` ``AsyncClient``."""

    async def post(
        self, url: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> ResponseLike: ...


@asynccontextmanager
async def open_client(lib: str, connections: int, timeout_s: float) -> AsyncIterator[ClientLike]:
    """One ``AsyncClient`` allowing ``connections`` concurrent keep-alive connections."""
    if lib == "httpx":
        async with httpx.AsyncClient(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            timeout=httpx.Timeout(timeout_s),
            trust_env=False,
        ) as client:
            yield client
    else:
        async with httpx2.AsyncClient(
            limits=httpx2.Limits(
                max_connections=connections, max_keepalive_connections=connections
            ),
            timeout=httpx2.Timeout(timeout_s),
            trust_env=False,
        ) as client2:
            yield client2


# -- processes -----------------------------------------------------------------------------
def console_script(name: str) -> str:
    """The console script ``name`` next to this interpreter, else the one on PATH (a venv
    made with ``--system-site-packages`` has none of those its base installed)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"cannot find the `{name}` console script; install its package first")
    return found


def amaris_executable() -> str:
    """The ``amaris`` console script next to this interpreter, else the one on PATH."""
    return console_script("amaris")


def py_spy() -> str | None:
    """The ``py-spy`` next to this interpreter, else on PATH, else None."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def require_py_spy(out: Path) -> str:
    """The ``py-spy`` to record into ``out`` (its folder created), else exit with a hint."""
    exe = py_spy()
    if exe is None:
        raise SystemExit("--py-spy needs py-spy: .venv/bin/pip install py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    return exe


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(sid: int | None) -> float | None:
    """CPU time (user + system, all threads) of session ``sid`` (a child and the processes
    it started), or of this process for None; None when ``/proc`` is unavailable."""
    if sid is None:
        times = os.times()
        return times.user + times.system
    pids = session_pids(sid)
    if not pids:
        return None
    total = 0.0
    for pid in pids:
        fields = proc_stat(pid)
        if fields is not None:
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


class Child:
    """A subprocess a benchmark owns, in its own session; stopped by PID (terminate,
    then kill), with whatever it left running in its session."""

    def __init__(
        self, name: str, argv: list[str], log_path: Path, cwd: Path, env: dict[str, str]
    ) -> None:
        self.name = name
        self.log_path = log_path
        with log_path.open("wb") as log:
            # Own session: a Ctrl-C in the terminal reaches only the benchmark, which
            # then stops its children itself, in order.
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        stop_session(self.popen, STOP_TIMEOUT_S, self._report)

    def _report(self, line: str) -> None:
        print(f"  {self.name} (pid {self.pid}) {line}", file=sys.stderr)


SMOKE_PREFECT_API = "AMARIS_BENCH_PREFECT_API_URL"
"""Set, the Prefect API the amaris children use instead of booting a Prefect server each:
the smoke tests set it to the suite's; a benchmark that measures Prefect's own store does not
read it, and no figure is taken with it."""
SMOKE_PREFECT_DB = "AMARIS_BENCH_PREFECT_DB"
"""Set with :data:`SMOKE_PREFECT_API`: that server's SQLite database, where the benchmarks
that read a step's runs from their server's database read them (:func:`prefect_database`)."""
SMOKE_SETTINGS = {
    "AMARIS_PREFECT__REPAIR_INTERVAL_SECONDS": "null",
    "AMARIS_MEMORY__EMBEDDING_MODEL": "hashing",
}
"""Settings of the amaris children on the shared Prefect (a smoke run, which takes no figure):
no scheduled repair and the hashing embedder, so none starts a repair worker or loads MiniLM,
whose CPU at start-up is no part of what a smoke run checks."""


def child_env(*, own_prefect: bool = False) -> dict[str, str]:
    """This environment, without what would change what is measured; unless ``own_prefect``,
    with :data:`SMOKE_PREFECT_API` as the children's Prefect API when it is set (and
    :data:`SMOKE_SETTINGS`)."""
    env = dict(os.environ)
    # A developer's keys, endpoint or Prefect must not change what is measured (amaris
    # keeps Prefect's home under memory.path, in the temporary folder, when unset).
    for name in (
        "AMARIS_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "PREFECT_API_URL",
        "PREFECT_HOME",
    ):
        env.pop(name, None)
    shared = env.pop(SMOKE_PREFECT_API, None)
    env.pop(SMOKE_PREFECT_DB, None)
    if shared and not own_prefect:
        env["PREFECT_API_URL"] = shared
        env.update(SMOKE_SETTINGS)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def shared_prefect_database() -> Path | None:
    """The shared Prefect server's database (:data:`SMOKE_PREFECT_DB`) when the children use
    that server, else None: a benchmark that reads a step's runs from its own server's
    database may then use the shared server and read them there."""
    shared = os.environ.get(SMOKE_PREFECT_DB)
    return Path(shared) if shared and os.environ.get(SMOKE_PREFECT_API) else None


def prefect_database(data_dir: Path) -> Path | None:
    """The SQLite database of the Prefect server an amaris with its data in ``data_dir``
    used: its own (``<data>/prefect/*.db``), else :func:`shared_prefect_database`."""
    own = sorted((data_dir / "prefect").glob("*.db"))
    return own[0] if own else shared_prefect_database()


def start_offline_llm(
    exe: str, latency_ms: float, folder: Path, env: dict[str, str]
) -> tuple[Child, str]:
    """``amaris offline-llm`` on a free port, logging into ``folder``; (child, base URL)."""
    port = free_port()
    llm = Child(
        "offline-llm",
        [
            exe,
            "offline-llm",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--latency-ms",
            f"{latency_ms:g}",
        ],
        folder / "offline-llm.log",
        folder,
        env,
    )
    return llm, f"http://127.0.0.1:{port}/v1"


def wait_ready(child: Child, url: str, check: Callable[[httpx2.Response], bool]) -> None:
    """Poll ``url`` until ``check`` accepts the answer; fail if the child dies or hangs."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last = "no answer"
    # One client for the polls (a new one builds a TLS context each time: amaris/readiness.py).
    with httpx2.Client(timeout=2.0, trust_env=False) as http:
        while time.monotonic() < deadline:
            if not child.alive():
                raise RuntimeError(
                    f"{child.name} exited with code {child.popen.returncode}:\n{child.log_tail()}"
                )
            try:
                response = http.get(url)
                if response.status_code == 200 and check(response):
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx2.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
    raise RuntimeError(
        f"{child.name} not ready after {STARTUP_TIMEOUT_S:.0f}s ({last}):\n{child.log_tail()}"
    )


def wait_servers_ready(llm: Child, llm_url: str, amaris: Child, amaris_url: str) -> None:
    """Wait until the offline LLM lists its models and amaris judges through it."""
    wait_ready(llm, f"{llm_url}/models", lambda r: bool(r.json().get("data")))
    wait_ready(
        amaris,
        f"{amaris_url}/healthz",
        lambda r: (
            r.json().get("judge_backend") == llm_url and r.json().get("offline_judge") is False
        ),
    )


@contextmanager
def work_folder(prefix: str, keep: Path | None) -> Iterator[Path]:
    """``keep`` (created, kept afterwards) or a temporary folder removed on exit."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


@dataclass
class Stack:
    """The offline LLM and an ``amaris serve`` judging through it."""

    llm: Child
    amaris: Child
    llm_url: str
    amaris_url: str
    data_dir: Path
    config: dict[str, Any]


@contextmanager
def running_stack(
    latency_ms: float,
    workdir: Path,
    sections: dict[str, dict[str, Any]],
    *,
    own_prefect: bool = False,
) -> Iterator[Stack]:
    """Start the offline LLM (``latency_ms`` per call) and amaris judging through it, with
    its data under ``workdir`` and WARNING logs, ``sections`` merged into its config; stop
    both by PID on exit, whatever happens (amaris first: it holds connections to the LLM).
    ``own_prefect``: amaris boots its own Prefect server (:func:`child_env`).
    """
    exe = amaris_executable()
    env = child_env(own_prefect=own_prefect)
    children: list[Child] = []
    try:
        llm, llm_url = start_offline_llm(exe, latency_ms, workdir, env)
        children.append(llm)
        data_dir = workdir / "data"
        port = free_port()
        config: dict[str, Any] = {
            "server": {"host": "127.0.0.1", "port": port},
            # The offline judge on 127.0.0.1 stands for a hosted one: no per-endpoint
            # limit (a judge on this machine gets 4 in flight by default).
            "client": {"default": {"base_url": llm_url, "api_key": API_KEY, "max_concurrency": 0}},
            "memory": {"path": str(data_dir), "embedding_model": None},
            "logging": {"level": "WARNING"},
        }
        for name, values in sections.items():
            config[name] = {**config.get(name, {}), **values}
        path = workdir / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        amaris = Child(
            "amaris", [exe, "serve", "--config", str(path)], workdir / "amaris.log", workdir, env
        )
        children.append(amaris)
        url = f"http://127.0.0.1:{port}"
        wait_servers_ready(llm, llm_url, amaris, url)
        print(
            f"offline-llm pid {llm.pid} ({llm_url}, {latency_ms:g} ms/call), amaris pid "
            f"{amaris.pid} ({url}), files in {workdir}",
            flush=True,
        )
        yield Stack(llm, amaris, llm_url, url, data_dir, config)
    finally:
        for child in reversed(children):
            child.stop()


@contextmanager
def keyed_serve(workdir: Path, server: dict[str, Any] | None = None) -> Iterator[tuple[Child, int]]:
    """``amaris serve`` with ``server.api_key`` (:data:`API_KEY`), the hashing embedder and
    WARNING logs, its data under ``workdir``, on a free port of 127.0.0.1, ``server`` merged
    into its ``server:`` keys: (child, port), ready and idle; stopped by PID on exit,
    whatever happens."""
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "api_key": API_KEY, **(server or {})},
        "memory": {"path": str(workdir / "data"), "embedding_model": "hashing"},
        "logging": {"level": "WARNING"},
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    child = Child(
        "amaris",
        [amaris_executable(), "serve", "--config", str(path)],
        workdir / "amaris.log",
        workdir,
        child_env(),
    )
    try:
        wait_ready(child, f"http://127.0.0.1:{port}/healthz", lambda r: True)
        settle(child)
        yield child, port
    finally:
        child.stop()


def settle(child: Child, *, after_startup: bool = True) -> None:
    """Wait until ``child`` (and what it started) is idle: start-up work still running
    after /healthz answers (e.g. amaris's Prefect server) would skew the first measurement.
    ``after_startup`` only words the warning printed when it does not settle."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    used: float | None = None
    while time.monotonic() < deadline:
        before = cpu_seconds(child.pid)
        time.sleep(1.0)
        after = cpu_seconds(child.pid)
        if before is None or after is None:
            return  # no /proc: nothing to wait for
        used = after - before
        if used <= SETTLE_IDLE_CPU:
            return
    when = f" {SETTLE_TIMEOUT_S:.0f}s after start-up" if after_startup else ""
    print(
        f"  {child.name} still uses {used or 0:.0%} of a core{when}; measuring anyway",
        file=sys.stderr,
    )


def start_profiler(pid: int, out: Path | None) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of process ``pid`` and its children (raw stacks to ``out``)."""
    if out is None:
        return None
    exe = require_py_spy(out)
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--threads",
            "--nonblocking",
            "--rate",
            "100",
            "--format",
            PY_SPY_FORMATS.get(out.suffix, "raw"),
            "--output",
            str(out),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    """Stop ``py-spy record`` by its PID (SIGINT makes it write its output)."""
    if profiler is None or profiler.poll() is not None:
        return
    profiler.send_signal(signal.SIGINT)
    try:
        profiler.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        profiler.kill()
        profiler.wait(timeout=STOP_TIMEOUT_S)


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM handler: unwind like Ctrl-C, so that every owned process is stopped."""
    raise KeyboardInterrupt(f"signal {signum}")


# -- statistics and report -----------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Percentile ``q`` (0-100), linear interpolation; NaN with no sample."""
    data = sorted(values)
    if not data:
        return float("nan")
    rank = (len(data) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def fmt(value: float | None, digits: int = 1) -> str:
    """``value`` with ``digits`` decimals; "-" for None or NaN."""
    if value is None or value != value:
        return "-"
    return f"{value:.{digits}f}"


def loadavg(all_three: bool = False) -> str:
    """The 1-minute load average (with ``all_three``: 1, 5 and 15 minutes), or "-"."""
    try:
        averages = os.getloadavg()
    except OSError:
        return "-"
    return " ".join(f"{v:.2f}" for v in (averages if all_three else averages[:1]))


def machine() -> str:
    """nproc (and CPU model, last-level cache), Python version and OS, and the host's speed
    (:func:`host_speed`), for a report."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = ""
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    cache = last_level_cache()
    cpu = ", ".join(part for part in (model, f"{cache} cache" if cache else "") if part)
    return (
        f"nproc {cores}{f' ({cpu})' if cpu else ''}, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}, "
        f"host speed {host_speed():.1f} ms"
    )


def last_level_cache() -> str:
    """The size of the CPU's last-level cache (``480 MiB`` for the kernel's ``491520K``)
    or ""."""
    folder = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = []
    with suppress(OSError):
        for index in sorted(folder.glob("index*")):
            level = int((index / "level").read_text(encoding="ascii"))
            sizes.append((level, (index / "size").read_text(encoding="ascii").strip()))
    if not sizes:
        return ""
    size = max(sizes)[1]
    if size.endswith("K") and size[:-1].isdigit() and int(size[:-1]) % 1024 == 0:
        return f"{int(size[:-1]) // 1024} MiB"
    return size


SPEED_PAYLOAD = {f"key{i}": [i, f"value {i}", {"n": i / 7}] for i in range(40)}
"""A JSON object of the size and mix of a ``/score`` body's metadata."""


def host_speed(rounds: int = 5) -> float:
    """CPU milliseconds one thread takes here for a fixed pure-Python workload (JSON in and
    out, dicts, arithmetic: the kind of work amaris's request path does), the median of
    ``rounds``. Lower is faster. The same code's figures move with the host, and machines
    with the same core count and CPU name differ in speed; this figure, in each report's
    machine line, tells the hosts apart."""

    def once() -> float:
        start = time.thread_time()  # this thread's: a bench's other threads may be busy
        for _ in range(400):
            decoded = json.loads(json.dumps(SPEED_PAYLOAD))
            sum(len(key) * index for index, key in enumerate(decoded))
        return (time.thread_time() - start) * 1000

    return statistics.median(once() for _ in range(rounds))


def command_line() -> str:
    """This benchmark's command line, paths relative to the current folder when inside it."""

    def rel(path: str) -> str:
        try:
            return str(Path(path).relative_to(Path.cwd()))
        except ValueError:
            return path

    return shlex.join([rel(sys.executable), *map(rel, main_module()), *sys.argv[1:]])


def main_module() -> list[str]:
    """How this process's script was started: ``-m bench.<group>.<name>`` (as the scripts run),
    or the script's path."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is not None:
        return ["-m", spec.name]
    return [str(Path(sys.argv[0]).absolute())]


def this_script(module: str) -> list[str]:
    """A command that runs benchmark ``module`` (``bench.<group>.<name>``: its ``__spec__``'s
    name) again, for the workers it starts: with ``-m``, so they run from :data:`ROOT`
    (``cwd``), whatever started this process (a test, another folder)."""
    return [sys.executable, "-m", module]


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of benchmark ``name``'s section of the document."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def doc_section(
    name: str,
    title: str,
    what: str,
    table: str,
    *,
    script: str,
    when: datetime | None = None,
    load: str | None = None,
    command: str | None = None,
    targets: Iterable[tuple[str, str, str]] = (),
) -> str:
    """Benchmark ``name``'s section of ``docs/benchmarks.md`` in the page's compact form,
    between its markers: the ``title`` heading, ``what`` it measures (a sentence or two) with
    a link to ``script`` (its ``__file__``: the docstring holds the setup), the command (this
    process's by default), the machine line (``when``, UTC; :func:`machine`; the load
    average ``load``, else now's), one ``table`` of today's figures, and one line per target
    (target, measured, verdict)."""
    start, end = markers(name)
    moment = (when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        start,
        f"## {title}",
        "",
        f"{what.strip()} Details: [`{repo_path(script)}`](../{repo_path(script)}).\\",
        f"Command: `{command or command_line()}`. "
        f"Machine: {moment}; {machine()}; load average {load or loadavg()}.",
        "",
        table.strip(),
    ]
    verdicts = [f"**{verdict}** {target}: {measured}." for target, measured, verdict in targets]
    if verdicts:
        lines += ["", *verdicts] if len(verdicts) == 1 else ["", *(f"- {v}" for v in verdicts)]
    lines.append(end)
    return "\n".join(lines) + "\n"


DOC = ROOT / "docs" / "benchmarks.md"


def report_path(out: Path | None, smoke: bool) -> Path | None:
    """Where a benchmark writes its section: ``out``, else :data:`DOC`; a smoke run's only to
    an ``out`` elsewhere (None: printed, not written).

    Raises:
        SystemExit: a smoke run asked to write :data:`DOC` (its figures are no measurement).
    """
    if not smoke:
        return out or DOC
    if out is not None and out.resolve() == DOC.resolve():
        raise SystemExit("--smoke: its figures do not go to docs/benchmarks.md")
    return out


def repo_path(file: str) -> str:
    """``file`` relative to the repository's root (as given when it lies elsewhere)."""
    try:
        return Path(file).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return file


def write_doc(
    path: Path, text: str, mark_start: str, mark_end: str, intro: str = DOC_INTRO
) -> None:
    """Replace only the section between ``mark_start`` and ``mark_end`` (re-reading the file
    right before); append it if absent; create the file (``intro`` first) if missing."""
    if path.is_file():
        current = path.read_text(encoding="utf-8")
        start = current.find(mark_start)
        end = current.find(mark_end, start + 1) if start >= 0 else -1
        if start >= 0 and end >= 0:
            updated = current[:start] + text.rstrip("\n") + current[end + len(mark_end) :]
        else:
            updated = current.rstrip("\n") + "\n\n" + text
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        updated = intro + "\n" + text
    if not updated.endswith("\n"):
        updated += "\n"
    path.write_text(updated, encoding="utf-8")
