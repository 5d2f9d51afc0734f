"""Several worker processes behind one port (``server.workers``, ``--workers``).

In front of remote backends Missive is a protocol translator bound by the
CPU of one Python process; ``server.workers = N`` runs N processes that
accept connections on one listening socket, as gunicorn or Hypercorn's own
``--workers`` do (benchmarks/bench_gateway.py, issue 19).

``missive serve`` with N > 1 (:func:`check`, :func:`supervise`):

1. builds the app once in the first process, the supervisor (configuration
   errors are reported once; the thinking signing key is read or created
   once, so every worker signs with it), binds the listening socket (a port
   already taken is reported once), then forks the N workers before any
   event loop runs, and closes its own copy of the socket;
2. each worker starts the models (each has its own connections to the
   backends, its own replica health view), serves, and shuts down as a
   single ``missive serve`` does (:mod:`missive.server.shutdown`);
3. the supervisor turns each SIGTERM or SIGINT it receives into one message
   to every worker over a pipe: the first begins each worker's drain, the
   second ends each grace at once, a third kills the workers (SIGKILL). The
   workers ignore the signals themselves, so a signal sent to the whole
   process group (Ctrl-C in a terminal, a supervisor that signals every
   process) counts once, not once per copy received. A worker whose
   supervisor died (its pipe closed) drains and exits;
4. a worker that exits without being asked to (a crash) makes the supervisor
   drain and stop the others and exit 1, so a process supervisor restarts
   the whole server, as it would a single process;
5. the supervisor exits 0 when every worker exited 0 after a signal.

**In-process models and workers.** A model that runs inside the process
(``llamacpp``, ``mlx``, ``echo``: ``Capabilities.in_process``) would be
loaded once per worker, each copy taking the model's memory and competing
for the same cores, and admission (``max_concurrency``) would no longer
bound the model's work. So ``workers`` above 1 is refused at start-up with a
configuration error naming the model; serve such a model from a
``missive serve`` with one worker (a second server on another port can
serve the remote models with several).

**Message Batches and workers.** One process owns the batch database (its
lock, :mod:`missive.batches.service`), so batches are off with several
workers (:func:`settle_batches`): left at its default, ``batches.enabled``
becomes false (logged; the batch endpoints answer 404); set to true
explicitly, it is a configuration error. Serve batches from a ``missive
serve`` with one worker.

**What is per worker, what is shared.**

* Admission is per worker: each worker admits its share of a model's
  ``max_concurrency`` and ``queue_depth`` (:func:`missive.serving.admission.share`: together they
  add up to the configured values; ``max_concurrency`` below N is refused,
  each worker needs a permit). The kernel spreads connections over the
  workers, not requests: one worker may answer 529 while another has room.
  Remote models have no ``max_concurrency`` unless one is set.
* ``/metrics`` is the whole server's, whichever worker answers: counters and
  histograms are kept in files shared by the workers (``prometheus_client``'s
  multiprocess mode, in a temporary directory the supervisor removes), and
  the gauges of requests running and waiting are each worker's state
  published every :data:`PUBLISH_INTERVAL` seconds and summed (a replica is
  reported healthy when every worker has it in rotation).
* ``/health``, ``/readyz``, ``/v1/status`` and ``missive ps`` describe the
  worker that answered (``/v1/status`` says which, ``worker``).

POSIX only (``os.fork``); N > 1 is refused on Windows.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from ..config import ConfigError
from ..serving.logs import set_worker

if TYPE_CHECKING:
    from ..config import Config
    from ..models.table import ModelTable

__all__ = [
    "check",
    "settle_batches",
    "supervise",
    "listening_sockets",
    "shared_metrics_dir",
    "PUBLISH_INTERVAL",
    "WorkerInfo",
]

log = logging.getLogger("missive.workers")

#: Seconds between two publications of a worker's load gauges (requests
#: running and waiting) for ``/metrics``.
PUBLISH_INTERVAL = 1.0


class WorkerInfo:
    """Which worker this process is: ``index`` (0-based) of ``count``."""

    def __init__(self, index: int = 0, count: int = 1) -> None:
        self.index = index
        self.count = count

    def summary(self) -> dict[str, int]:
        """``{"index", "count", "pid"}`` for ``/v1/status``."""
        return {"index": self.index, "count": self.count, "pid": os.getpid()}


def check(workers: int, models: ModelTable) -> None:
    """Refuse ``workers`` above 1 where it cannot work (module doc).

    Raises:
        ConfigError: an in-process model, a ``max_concurrency`` below
            ``workers``, or no ``os.fork`` (Windows).
    """
    if workers <= 1:
        return
    if not hasattr(os, "fork"):
        raise ConfigError(
            f"server.workers = {workers} needs os.fork, which this platform lacks; set server.workers = 1"
        )
    for model_id, driver in models.drivers.items():
        caps = driver.capabilities
        if caps.in_process:
            raise ConfigError(
                f"server.workers = {workers}: model '{model_id}' (driver '{driver.name}') runs inside the "
                "server process, and every worker would load its own copy; serve it with server.workers = 1 "
                "(several workers are for models served by remote backends)"
            )
        if caps.max_concurrency is not None and caps.max_concurrency < workers:
            raise ConfigError(
                f"server.workers = {workers}: model '{model_id}' admits "
                f"max_concurrency = {caps.max_concurrency} "
                "generations at once, and each worker needs at least one; lower server.workers or raise "
                "its max_concurrency"
            )


def settle_batches(config: Config) -> None:
    """Turn Message Batches off for ``server.workers`` above 1 when
    ``batches.enabled`` was left at its default (module doc).

    Raises:
        ConfigError: ``batches.enabled = true`` was set explicitly.
    """
    workers = config.server.workers
    if workers <= 1 or not config.batches.enabled:
        return
    if "enabled" in config.batches.model_fields_set:
        raise ConfigError(
            f"server.workers = {workers} and batches.enabled = true: one process owns the batch database; "
            "serve batches from a missive serve with server.workers = 1, or set batches.enabled = false"
        )
    config.batches.enabled = False
    log.info(
        "Message Batches are off with server.workers = %d (one process owns the batch database); "
        "serve them from a missive serve with one worker",
        workers,
    )


@contextmanager
def shared_metrics_dir() -> Iterator[str]:
    """A temporary directory for the workers' shared metric files
    (``PROMETHEUS_MULTIPROC_DIR``, set for this process and its children),
    removed on exit."""
    directory = tempfile.mkdtemp(prefix="missive-metrics-")
    previous = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = previous
        shutil.rmtree(directory, ignore_errors=True)


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """The sockets ``count`` workers listen on, bound here (a port in use is
    an ``OSError`` here, once), not listening yet (each worker listens when
    it serves).

    On Linux, one socket per worker, all bound to the port with
    ``SO_REUSEPORT``: the kernel spreads new connections over the workers
    that listen. One shared socket would do too, but every worker would be
    woken for each connection and asyncio accepts up to its backlog at once,
    so one worker ends up with most of the keep-alive connections (measured:
    64 connections, one worker used 574 CPU ticks, the other 2). Elsewhere
    (``SO_REUSEPORT`` does not spread connections on macOS), one socket
    shared by all. A port of 0 gets one free port for all.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    spread = count > 1 and sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
    sockets: list[socket.socket] = []
    try:
        for _ in range(count if spread else 1):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if spread:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.setblocking(False)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def supervise(
    count: int,
    work: Callable[[int, int], int],
    *,
    forked: Callable[[], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
) -> int:
    """Fork ``count`` workers running ``work(index, control_fd)`` and wait
    for them (module doc, steps 3 to 5). ``control_fd`` is the read end of
    the worker's pipe from the supervisor: one byte per signal received
    (the signal's number), end of file when the supervisor is gone.
    ``work`` returns the worker's exit status. ``forked()`` runs in the
    supervisor once every worker is forked (to close what only the workers
    use: the listening socket); ``on_exit(pid)`` after a worker ended.

    Returns:
        the exit status for the supervisor: 0 when every worker exited 0
        after a signal, else 1 (or the first failing worker's status).
    """
    if threading.active_count() > 1:
        log.warning(
            "forking workers with %d threads running: only the forking thread goes on in each worker",
            threading.active_count(),
        )
    children: dict[int, tuple[int, int]] = {}  # pid -> (index, write end of its pipe)
    received = 0
    stopping = False

    def tell(signum: int) -> None:
        for _, write in list(children.values()):
            try:
                os.write(write, bytes([signum]))
            except OSError:
                pass  # that worker has ended

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal received, stopping
        received += 1
        stopping = True
        if received <= 2:
            log.info("received %s: passed on to %d workers", signal.Signals(signum).name, len(children))
            tell(signum)
        else:
            log.warning("received %s a third time: killing the workers", signal.Signals(signum).name)
            for pid in list(children):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        for index in range(count):
            read, write = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the worker
                os._exit(_run_worker(work, index, read, [write, *(w for _, w in children.values())]))
            os.close(read)
            children[pid] = (index, write)
        if forked is not None:
            forked()
        status = 0
        while children:
            try:
                pid, wait_status = os.wait()
            except ChildProcessError:
                break
            if pid not in children:
                continue
            index, write = children.pop(pid)
            os.close(write)
            code = os.waitstatus_to_exitcode(wait_status)
            if on_exit is not None:
                on_exit(pid)
            if code == 0 and stopping:
                continue
            if not stopping:
                stopping = True
                log.error(
                    "worker %d (pid %d) exited with status %d unasked: stopping the others", index, pid, code
                )
                tell(signal.SIGTERM)
            else:
                log.error("worker %d (pid %d) exited with status %d", index, pid, code)
            if status == 0:
                status = code if code > 0 else 1
        return status
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for _, write in children.values():
            os.close(write)


def _run_worker(work: Callable[[int, int], int], index: int, control: int, close: list[int]) -> int:
    """The body of a forked worker: its exit status (never raises)."""
    code = 1
    try:
        # The supervisor passes the signals on, once each (module doc).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for fd in close:  # the pipes of the supervisor to this and the earlier workers
            os.close(fd)
        set_worker(index)
        code = work(index, control)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
    return code
