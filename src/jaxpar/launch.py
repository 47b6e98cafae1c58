"""``python -m jaxpar.launch``: run a script in several local processes, like ``torchrun``.

Each process gets its rank, the process count and the coordinator address (127.0.0.1 on a
free port) in its environment, and a chosen number of simulated CPU devices; inside the
script, :func:`jaxpar.initialize_distributed` reads them. Every line a process prints is
prefixed with its rank, on the launcher's standard output or error as the process wrote
it. When one process fails, the launcher stops the others and exits
with the failing rank's status; so it does on a timeout and on Ctrl-C. No process outlives
the launcher: each runs in its own process group, which is signalled as a whole.

Example::

    python -m jaxpar.launch --nproc 2 --devices-per-process 4 train.py --steps 100
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_COORDINATOR = "JAXPAR_COORDINATOR"
ENV_NUM_PROCESSES = "JAXPAR_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXPAR_PROCESS_ID"
ENV_INIT_TIMEOUT = "JAXPAR_INIT_TIMEOUT"
HOST = "127.0.0.1"
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
GRACE_SECONDS = 5.0


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
    """Starts the processes, relays their output, and stops them all together."""

    def __init__(self, config: LaunchConfig, out=None, err=None) -> None:
        self.config = config
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.processes: list[subprocess.Popen] = []
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        with self._lock:
            print(f"[launch] {message}", file=self.out, flush=True)

    def start(self) -> None:
        port = self.config.port if self.config.port is not None else free_port()
        for rank in range(self.config.nproc):
            process = subprocess.Popen(
                [sys.executable, str(self.config.script), *self.config.args],
                env=process_environment(self.config, rank, port),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() reaches its children
                text=True,
                bufsize=1,
            )
            self.processes.append(process)
            for source, target in ((process.stdout, self.out), (process.stderr, self.err)):
                reader = threading.Thread(
                    target=self._relay, args=(rank, source, target), daemon=True
                )
                reader.start()
                self._readers.append(reader)

    def _relay(self, rank: int, source, target) -> None:
        """Copy a process's output line by line, each line prefixed with its rank."""
        for line in source:
            with self._lock:
                target.write(f"[rank {rank}] {line}")
                target.flush()

    def wait(self) -> int:
        """Wait for every process; the exit status the launcher should return."""
        deadline = None if self.config.timeout is None else time.monotonic() + self.config.timeout
        while True:
            codes = [process.poll() for process in self.processes]
            failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                rank, code = failed[0]
                self.say(f"rank {rank} exited with status {code}; stopping the other ranks.")
                self.stop()
                return code if code > 0 else 128 - code
            if all(code == 0 for code in codes):
                self._join_readers()
                return 0
            if deadline is not None and time.monotonic() > deadline:
                running = [rank for rank, code in enumerate(codes) if code is None]
                self.say(
                    f"timeout: ranks {running} still running after {self.config.timeout:g} s; "
                    f"stopping them (raise --timeout if the work needs longer)."
                )
                self.stop()
                return EXIT_TIMEOUT
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM every process group still running, then SIGKILL what is left."""
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes:
            _signal_group(process, signal.SIGKILL)  # also children left behind by a rank
            process.wait()
        self._join_readers()

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(timeout=GRACE_SECONDS)


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
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        launcher.start()
        return launcher.wait()
    except KeyboardInterrupt:
        launcher.say("interrupted; stopping every rank.")
        launcher.stop()
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


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
