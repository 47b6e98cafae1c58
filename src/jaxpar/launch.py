"""``python -m jaxpar.launch``: run a script in several local processes, like ``torchrun``.

Each process gets its rank, the process count and the coordinator address (127.0.0.1 on a
free port) in its environment, and a chosen number of simulated CPU devices; inside the
script, :func:`jaxpar.initialize_distributed` reads them. Every line a process prints is
prefixed with its rank, on the launcher's standard output or error as the process wrote
it.

When one rank fails (an uncaught exception, ``sys.exit(n)`` with n ≠ 0, a signal such as
the OOM killer's SIGKILL), the launcher stops the others at once and exits with the failing
rank's status (128 + n for signal n). Its traceback appears once; what the stopped ranks
print as they lose their peer is dropped. This holds after ``jax.distributed`` is
initialised too, where a plain Python exit would wait at JAX's shutdown barrier for
minutes: each rank runs under :mod:`jaxpar._rank`, which reports the failure and leaves
without that barrier. ``--timeout`` and Ctrl-C stop every rank too. No process outlives
the launcher: each runs in its own process group, which is signalled as a whole.

Example::

    python -m jaxpar.launch --nproc 2 --devices-per-process 4 train.py --steps 100
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jaxpar._rank import ENV_CONTROL_FD

ENV_COORDINATOR = "JAXPAR_COORDINATOR"
ENV_NUM_PROCESSES = "JAXPAR_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXPAR_PROCESS_ID"
ENV_INIT_TIMEOUT = "JAXPAR_INIT_TIMEOUT"
HOST = "127.0.0.1"
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
GRACE_SECONDS = 5.0
# How long the other ranks' output already on its way is still relayed once a rank
# reports that it is failing.
SETTLE_SECONDS = 0.2


class LaunchError(Exception):
    """Bad launcher input: the message says what to change."""


@dataclass(frozen=True)
class LaunchConfig:
    """What to start: ``nproc`` copies of ``script args`` talking through ``port``."""

    nproc: int
    script: Path
    args: tuple[str, ...] = ()
    devices_per_process: int | None = None
    port: int | None = None
    timeout: float | None = None
    init_timeout: int = 60


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def check_port(port: int) -> None:
    """Raise a LaunchError if ``port`` on 127.0.0.1 cannot be used by the coordinator."""
    if not 0 < port < 65536:
        raise LaunchError(f"--port must be between 1 and 65535, got {port}.")
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError as error:
            raise LaunchError(
                f"port {port} on {HOST} is already in use ({error.strerror}); choose another "
                f"with --port, or leave --port out to use a free one."
            ) from None


def process_environment(config: LaunchConfig, rank: int, port: int) -> dict[str, str]:
    """The environment of process ``rank``: the parent's, plus what it needs to connect."""
    env = dict(os.environ)
    env.update(
        {
            ENV_COORDINATOR: f"{HOST}:{port}",
            ENV_NUM_PROCESSES: str(config.nproc),
            ENV_PROCESS_ID: str(rank),
            ENV_INIT_TIMEOUT: str(config.init_timeout),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if config.devices_per_process is not None:
        env["JAX_NUM_CPU_DEVICES"] = str(config.devices_per_process)
        env["JAX_PLATFORMS"] = "cpu"
    return env


class Launcher:
    """Starts the processes, relays their output, and stops them all together.

    Each rank runs under :mod:`jaxpar._rank`, which tells the launcher through a socket
    that it is failing before it exits, or that it finished; a rank that dies without a
    word closes the socket as it dies. Either way the launcher learns of a failure before
    the other ranks can react to it, and from then on relays only the failing rank's
    output: what the others print while they are stopped (a lost peer, a broken
    collective, the coordination service's C++ traces) is noise. While a silent rank's
    exit status is not known yet, the others' lines are held back, then relayed or dropped.
    """

    def __init__(self, config: LaunchConfig, out=None, err=None) -> None:
        self.config = config
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.processes: list[subprocess.Popen] = []
        self._readers: dict[int, list[threading.Thread]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # Failing ranks in the order the launcher learnt of them: [rank, exit status], the
        # status None while a rank that died silently has not been reaped yet.
        self._failures: list[list] = []
        self._held: list[tuple[int, object, str]] = []
        self._stopping = False
        self._controls: dict[int, socket.socket] = {}  # the sockets still being listened to

    def say(self, message: str) -> None:
        with self._lock:
            print(f"[launch] {message}", file=self.out, flush=True)

    def start(self) -> None:
        port = self.config.port if self.config.port is not None else free_port()
        for rank in range(self.config.nproc):
            ours, theirs = socket.socketpair()
            env = process_environment(self.config, rank, port)
            env[ENV_CONTROL_FD] = str(theirs.fileno())
            process = subprocess.Popen(
                [sys.executable, "-m", "jaxpar._rank", str(self.config.script), *self.config.args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # its own process group: stop() reaches its children
                text=True,
                bufsize=1,
            )
            theirs.close()
            self.processes.append(process)
            self._readers[rank] = [
                _thread(self._relay, rank, process.stdout, self.out),
                _thread(self._relay, rank, process.stderr, self.err),
            ]
            self._controls[rank] = ours
            _thread(self._listen, rank, ours)
            _thread(self._watch, rank, process)

    def _relay(self, rank: int, source, target) -> None:
        """Copy a process's output line by line, each line prefixed with its rank."""
        for line in source:
            self._settle(rank)
            with self._lock:
                self._show(rank, target, f"[rank {rank}] {line}")

    def _settle(self, rank: int) -> None:
        """Wait until what the other ranks told the launcher has been heard. A rank that dies closes its socket before its peers can notice and print
        about it, so a line that another rank prints in reaction to the death finds that
        socket still unread here, and waits until the death is recorded."""
        deadline = time.monotonic() + GRACE_SECONDS  # only a listener that hangs waits this long
        while time.monotonic() < deadline:
            with self._lock:
                others = [c for r, c in self._controls.items() if r != rank]
            try:
                if not select.select(others, [], [], 0)[0]:
                    return
            except (OSError, ValueError):  # one closed meanwhile: look again
                pass
            time.sleep(0.01)

    def _show(self, rank: int, target, text: str) -> None:
        """Write, hold back or drop a line of ``rank`` (the lock is held)."""
        if self._failures:
            culprit, status = self._failures[0]
            if rank != culprit:
                if status is None:
                    self._held.append((rank, target, text))
                return
        elif self._stopping:
            return
        target.write(text)
        target.flush()

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for line in held:
            self._show(*line)

    def _listen(self, rank: int, control: socket.socket) -> None:
        """Hear a rank's report that it is failing (and answer once it is recorded) or that
        it finished; a rank that closes the socket without a word is suspected of dying."""
        said = False
        with control, control.makefile("rb") as reports:
            try:
                for report in reports:
                    said = True
                    words = report.split()
                    if words[:1] == [b"fail"]:
                        # The rank waits for the answer, so no other rank can have noticed
                        # anything yet: what they print meanwhile is still theirs to show.
                        time.sleep(SETTLE_SECONDS)
                        self._record(rank, int(words[1]))
                        try:
                            control.sendall(b"k")
                        except OSError:
                            pass
            except ConnectionResetError:
                # The rank stopped waiting for the answer (on a loaded machine) and exited
                # with it unread: its report, if it made one, is recorded all the same.
                pass
            if not said:
                self._record(rank, None)
            with self._lock:
                del self._controls[rank]

    def _watch(self, rank: int, process: subprocess.Popen) -> None:
        """Record a rank's exit status: a failure unless it is 0 (a signal n gives 128 + n)."""
        code = process.wait()
        with self._changed:
            suspected = [f for f in self._failures if f[0] == rank and f[1] is None]
            if code != 0 and suspected:
                suspected[0][1] = code if code > 0 else 128 - code
            elif code != 0 and not any(f[0] == rank for f in self._failures):
                self._failures.append([rank, code if code > 0 else 128 - code])
            elif suspected:  # it exited normally after all
                self._failures.remove(suspected[0])
            self._release_held()
            self._changed.notify_all()

    def _record(self, rank: int, status: int | None) -> None:
        with self._changed:
            if not any(f[0] == rank for f in self._failures):
                self._failures.append([rank, status])
            self._changed.notify_all()

    def _failure(self) -> tuple[int, int] | None:
        """The rank whose failure ended the run, and its status, once known."""
        if self._failures and self._failures[0][1] is not None:
            return tuple(self._failures[0])
        return None

    def wait(self) -> int:
        """Wait for every process; the exit status the launcher should return."""
        timeout = self.config.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while (failure := self._failure()) is None:
                codes = [process.poll() for process in self.processes]
                if all(code == 0 for code in codes):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    running = [rank for rank, code in enumerate(codes) if code is None]
                    self._stopping = True
                    break
                self._changed.wait(timeout=0.5)
        if failure is not None:
            rank, status = failure
            self._finish(rank)  # its traceback first, then the launcher's line
            self.say(f"rank {rank} exited with status {status}; stopping the other ranks.")
            self.stop(grace=0)  # without their peer they can only hang or fail: no grace
            return status
        if self._stopping:
            self.say(
                f"timeout: ranks {running} still running after {timeout:g} s; stopping them "
                f"(raise --timeout if the work needs longer)."
            )
            self.stop()
            return EXIT_TIMEOUT
        for rank in range(len(self.processes)):
            self._finish(rank)
        return 0

    def _finish(self, rank: int, grace: float = GRACE_SECONDS) -> None:
        """Wait up to ``grace`` seconds for a rank that is exiting, end it and what it left
        behind, and relay the rest of its output."""
        process = self.processes[rank]
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(process, signal.SIGKILL)  # its children: nothing outlives the run
        process.wait()
        for reader in self._readers[rank]:
            reader.join(timeout=GRACE_SECONDS)

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """SIGTERM every process group still running, give them ``grace`` seconds, then
        SIGKILL what is left (at once with ``grace=0``)."""
        with self._lock:
            self._stopping = True
        if grace > 0:
            for process in self.processes:
                if process.poll() is None:
                    _signal_group(process, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for process in self.processes:
                try:
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for rank in range(len(self.processes)):
            self._finish(rank, grace=0)


def _thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def launch(config: LaunchConfig, out=None, err=None) -> int:
    """Run ``config`` to the end; returns the exit status (0, a rank's, 124 or 130)."""
    if config.nproc < 1:
        raise LaunchError(f"--nproc must be at least 1, got {config.nproc}.")
    if not config.script.is_file():
        raise LaunchError(
            f"the script {config.script} does not exist; give the path of a Python file."
        )
    if config.devices_per_process is not None and config.devices_per_process < 1:
        raise LaunchError(
            f"--devices-per-process must be at least 1, got {config.devices_per_process}."
        )
    if config.port is not None:
        check_port(config.port)
    launcher = Launcher(config, out, err)
    # Ctrl-C and SIGTERM stop the ranks, even when the launcher was started by a process
    # that ignores SIGINT (as a background job's is).
    previous = {
        sig: signal.signal(sig, handler)
        for sig, handler in ((signal.SIGTERM, _raise_interrupt), (signal.SIGINT, _raise_interrupt))
    }
    try:
        launcher.start()
        return launcher.wait()
    except KeyboardInterrupt:
        launcher.say("interrupted; stopping every rank.")
        launcher.stop()
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum, frame):  # SIGTERM to the launcher stops the ranks as Ctrl-C does
    raise KeyboardInterrupt


def parse_args(argv: Sequence[str] | None = None) -> LaunchConfig:
    parser = argparse.ArgumentParser(
        prog="python -m jaxpar.launch",
        description="Run a script in several local processes for jax.distributed (like torchrun).",
    )
    parser.add_argument("--nproc", type=int, required=True, help="number of processes")
    parser.add_argument(
        "--devices-per-process",
        type=int,
        default=None,
        help="simulated CPU devices in each process",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="coordinator port (default: a free one)"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="stop every process after this many seconds"
    )
    parser.add_argument(
        "--init-timeout",
        type=int,
        default=60,
        help="seconds jax.distributed.initialize waits for all ranks",
    )
    parser.add_argument("script", type=Path, help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    ns = parser.parse_args(argv)
    return LaunchConfig(
        nproc=ns.nproc,
        script=ns.script,
        args=tuple(ns.args),
        devices_per_process=ns.devices_per_process,
        port=ns.port,
        timeout=ns.timeout,
        init_timeout=ns.init_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return launch(parse_args(argv))
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
