"""``python -m jaxpar.launch``: run a script in several local processes, like ``torchrun``.

Each process gets its rank, the process count and the coordinator address (127.0.0.1 on a
free port) in its environment, and either a chosen number of simulated CPU devices
(``--devices-per-process``) or, on a machine with NVIDIA GPUs, its share of them in
``JAX_LOCAL_DEVICE_IDS``: the visible GPUs split evenly, one each when ``--nproc`` is their
number (as torchrun's workers each take the GPU of their ``LOCAL_RANK``), or
``--gpus-per-process`` each. Without that, every process would claim every GPU. Inside
the script, :func:`jaxpar.initialize_distributed` reads all of it. Every line a process prints is
prefixed with its rank, on the launcher's standard output or error as the process wrote
it.

When one rank fails (an uncaught exception, ``sys.exit(n)`` with n ≠ 0, a signal such as
the OOM killer's SIGKILL), the launcher stops the others at once and exits with the failing
rank's status (128 + n for signal n). One traceback appears, the first failing rank's,
even when several fail; what the other ranks print as they lose their peer is dropped.
This holds after ``jax.distributed`` is initialised too, where a plain Python exit would
wait at JAX's shutdown barrier for minutes: each rank runs under :mod:`jaxpar._rank`,
which reports the failure and leaves without that barrier. A rank that finishes while
another goes on for more than ``FINISH_SECONDS`` (10 s) would leave that one waiting in a
collective until JAX's shutdown timeout: the launcher stops the run then, with status 1.

``--timeout`` and Ctrl-C stop every rank within ``STOP_SECONDS`` (1.5 s: SIGINT, then
SIGKILL); a second Ctrl-C changes nothing. SIGTERM to the launcher is what a scheduler
sends before it ends a job: the launcher passes it on to every rank as the same
preemption notice (JAX catches it, see ``multihost_utils.reached_preemption_sync_point``),
waits ``--term-grace`` seconds (30 by default) for them to save and exit, then ends what
is left and exits with 143. No process outlives the launcher: each rank runs in its own
process group, which is signalled as a whole, and on Linux the launcher adopts what a
rank leaves behind in a session of its own, and ends it too.

Example::

    python -m jaxpar.launch --nproc 2 --devices-per-process 4 train.py --steps 100
"""

from __future__ import annotations

import argparse
import math
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
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_UNFINISHED = 1
GRACE_SECONDS = 5.0
STOP_SECONDS = 1.5  # from SIGINT to SIGKILL when the run is stopped
FINISH_SECONDS = 10.0  # how long ranks may keep working after another one finished
TERM_GRACE_SECONDS = 30.0  # after a SIGTERM, for the ranks to save and exit
FDS_PER_RANK = 4  # the launcher's ends of a rank's two pipes and its socket, and a margin
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
    term_grace: float = TERM_GRACE_SECONDS
    gpus_per_process: int | None = None


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


def visible_gpus() -> int:
    """How many NVIDIA GPUs this process can use: those ``CUDA_VISIBLE_DEVICES`` lists if it
    is set, else those the driver lists in ``/proc/driver/nvidia/gpus``."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([gpu for gpu in listed.split(",") if gpu.strip()])
    folder = Path("/proc/driver/nvidia/gpus")
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def gpu_shares(config: LaunchConfig, gpus: int) -> list[list[int]] | None:
    """The GPUs each rank is given (indices among the visible ones), or None where the
    ranks run on simulated CPU devices or the machine has no GPU."""
    if config.devices_per_process is not None or gpus == 0:
        if config.gpus_per_process is not None and config.devices_per_process is not None:
            raise LaunchError(
                "--gpus-per-process and --devices-per-process exclude each other: the first "
                "gives each rank GPUs, the second simulated CPU devices; keep one."
            )
        if config.gpus_per_process is not None:
            raise LaunchError(
                f"--gpus-per-process {config.gpus_per_process}, but no NVIDIA GPU is visible "
                f"(CUDA_VISIBLE_DEVICES, /proc/driver/nvidia/gpus); leave it out, or use "
                f"--devices-per-process to simulate devices on the CPU."
            )
        return None
    each = config.gpus_per_process or gpus // config.nproc
    if (
        each < 1
        or each * config.nproc > gpus
        or (not config.gpus_per_process and gpus % config.nproc)
    ):
        raise LaunchError(
            f"{config.nproc} processes cannot share the {gpus} visible GPUs evenly"
            + (
                f" with --gpus-per-process {config.gpus_per_process}"
                if config.gpus_per_process
                else ""
            )
            + f"; start {gpus} (one GPU each, as torchrun does) or a divisor of {gpus}, or "
            f"give each process some with --gpus-per-process. (JAX's usual layout is one "
            f"process per machine owning all its GPUs: --nproc 1.)"
        )
    return [list(range(rank * each, (rank + 1) * each)) for rank in range(config.nproc)]


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
    shares = gpu_shares(config, visible_gpus())
    if shares is not None:  # jax.distributed.initialize restricts the rank to these
        env["JAX_LOCAL_DEVICE_IDS"] = ",".join(map(str, shares[rank]))
    return env


class Preempted(Exception):
    """The launcher received SIGTERM: a scheduler's notice that the job is about to end."""


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
        self._preempted = False  # after a SIGTERM, every rank's output is shown
        self._finished: dict[int, float] = {}  # rank -> when it reported that it finished
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
                errors="backslashreplace",  # any bytes a rank writes are relayed, not fatal
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
        """Copy a process's output line by line, each line prefixed with its rank, until
        the process closes it: a rank blocked on a full pipe would never end."""
        for line in source:
            self._settle(rank)
            with self._lock:
                try:
                    self._show(rank, target, f"[rank {rank}] {line}")
                except (OSError, ValueError):  # the launcher's own output is gone: drain
                    pass

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
        if self._preempted:
            pass  # after a SIGTERM, every rank says what it saves
        elif self._stopping:
            return  # stopped by Ctrl-C, the timeout or another rank's failure: noise
        elif self._failures:
            culprit, status = self._failures[0]
            if rank != culprit:
                if status is None:
                    self._held.append((rank, target, text))
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
                    if words[:1] == [b"done"]:
                        with self._changed:
                            self._finished.setdefault(rank, time.monotonic())
                            self._changed.notify_all()
                    if words[:1] == [b"fail"]:
                        # The rank waits for the answer, so no other rank can have noticed
                        # anything yet: what they print meanwhile is still theirs to show.
                        time.sleep(SETTLE_SECONDS)
                        self._record(rank, int(words[1]))
                        self._let_the_first_failure_finish(rank)
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

    def _let_the_first_failure_finish(self, rank: int) -> None:
        """Keep a rank that fails after another alive until the first one has exited: its
        exit would make the first one's JAX print about the lost peer before its traceback."""
        with self._lock:
            first = self._failures[0][0]
        if first != rank:
            try:
                self.processes[first].wait(timeout=GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pass

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
        unfinished: list[int] = []
        with self._changed:
            while (failure := self._failure()) is None:
                codes = [process.poll() for process in self.processes]
                if all(code == 0 for code in codes):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    running = [rank for rank, code in enumerate(codes) if code is None]
                    self._stopping = True
                    break
                if (
                    self._finished
                    and time.monotonic() - min(self._finished.values()) > FINISH_SECONDS
                ):
                    unfinished = [r for r in range(len(codes)) if r not in self._finished]
                    if unfinished:
                        self._stopping = True
                        break
                self._changed.wait(timeout=0.25)
        if failure is not None:
            rank, status = failure
            self._finish(rank)  # its traceback first, then the launcher's line
            self.say(f"rank {rank} exited with status {status}; stopping the other ranks.")
            self.stop(grace=0)  # without their peer they can only hang or fail: no grace
            return status
        if unfinished:
            first = min(self._finished, key=self._finished.get)
            self.say(
                f"rank {first} finished, but ranks {unfinished} were still working "
                f"{FINISH_SECONDS:g} s later; the ranks of one job finish together, and a "
                f"rank left alone waits in a collective until JAX's shutdown timeout. "
                f"Stopping them: make every rank run the same steps to the end."
            )
            self.stop()
            return EXIT_UNFINISHED
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
        _end_orphans(known={p.pid for p in self.processes})  # children in their own session
        for reader in self._readers[rank]:
            reader.join(timeout=GRACE_SECONDS)

    def stop(self, grace: float = STOP_SECONDS, sig: signal.Signals = signal.SIGINT) -> None:
        """Send ``sig`` to every process group still running, give them ``grace`` seconds,
        then SIGKILL what is left (at once with ``grace=0``). SIGINT, not SIGTERM: once
        ``jax.distributed`` is initialised, JAX catches SIGTERM as a preemption notice."""
        with self._lock:
            self._stopping = True
        if grace > 0:
            for process in self.processes:
                if process.poll() is None:
                    _signal_group(process, sig)
            deadline = time.monotonic() + grace
            for process in self.processes:
                try:
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for process in self.processes:  # all at once: a loaded machine is slow to reap
            _signal_group(process, signal.SIGKILL)
        for process in self.processes:
            process.wait()
        _end_orphans(known={p.pid for p in self.processes})
        for readers in self._readers.values():
            for reader in readers:
                reader.join(timeout=GRACE_SECONDS)

    def preempt(self) -> None:
        """Pass a SIGTERM on to every rank, as a scheduler's preemption notice, and give
        them ``term_grace`` seconds to save and exit; their output is shown meanwhile."""
        grace = self.config.term_grace
        with self._lock:
            self._preempted = True
        self.say(
            f"SIGTERM: passing it on to every rank as a preemption notice; they have "
            f"{grace:g} s to save and exit (--term-grace)."
        )
        self.stop(grace=grace, sig=signal.SIGTERM)


def _thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _adopt_orphans() -> None:
    """On Linux, become the parent of what a rank leaves behind when it dies (a child in a
    session of its own, which its process group's signal does not reach)."""
    if sys.platform == "linux":
        import ctypes

        PR_SET_CHILD_SUBREAPER = 36
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _end_orphans(known: set[int]) -> None:
    """SIGKILL and reap the launcher's children that are not ranks: what ranks left behind,
    adopted by :func:`_adopt_orphans`; again, for what those left behind in turn."""
    me = str(os.getpid())
    for _ in range(10):
        orphans = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            pid = int(stat.parent.name)
            if fields[1] == me and pid not in known:
                orphans.append(pid)
        if not orphans:
            return
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass


def launch(config: LaunchConfig, out=None, err=None) -> int:
    """Run ``config`` to the end; returns the exit status: 0, a failing rank's, 1 when ranks
    did not finish together, 124 after ``--timeout``, 130 after Ctrl-C, 143 after SIGTERM."""
    check_config(config)
    launcher = Launcher(config, out, err)
    _adopt_orphans()
    # Ctrl-C stops the ranks, even when the launcher was started by a process that ignores
    # SIGINT (as a background job's is); SIGTERM is passed on as a preemption notice.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, _raise_interrupt),
        signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_preempted),
    }
    try:
        launcher.start()
        return launcher.wait()
    except KeyboardInterrupt:
        _ignore_signals()  # a second Ctrl-C changes nothing: the ranks end in seconds
        launcher.say("interrupted; stopping every rank.")
        launcher.stop()
        return EXIT_INTERRUPTED
    except Preempted:
        signal.signal(signal.SIGINT, _raise_interrupt)  # another Ctrl-C or SIGTERM: at once
        signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            launcher.preempt()
        except KeyboardInterrupt:
            _ignore_signals()
            launcher.say("interrupted again; stopping every rank now.")
            launcher.stop(grace=0)
        return EXIT_TERMINATED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_config(config: LaunchConfig) -> None:
    """Raise a LaunchError naming the first setting that cannot work, and the fix."""
    if config.nproc < 1:
        raise LaunchError(f"--nproc must be at least 1, got {config.nproc}.")
    if config.script.is_dir():
        raise LaunchError(
            f"the script {config.script} is a directory; give the path of a Python file."
        )
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
    if config.gpus_per_process is not None and config.gpus_per_process < 1:
        raise LaunchError(f"--gpus-per-process must be at least 1, got {config.gpus_per_process}.")
    gpu_shares(config, visible_gpus())  # raises if the GPUs do not split
    if config.timeout is not None and not (math.isfinite(config.timeout) and config.timeout > 0):
        raise LaunchError(
            f"--timeout must be a number of seconds greater than 0, got {config.timeout}; "
            f"leave it out to let the ranks run as long as they need."
        )
    if not (math.isfinite(config.term_grace) and config.term_grace >= 0):
        raise LaunchError(
            f"--term-grace must be a number of seconds, 0 or more, got {config.term_grace}."
        )
    if config.init_timeout < 1:
        raise LaunchError(f"--init-timeout must be at least 1 second, got {config.init_timeout}.")
    _check_open_files(config.nproc)


def _check_open_files(nproc: int) -> None:
    """Raise the limit of open files to what ``nproc`` ranks need, or say what to do."""
    import resource

    needed = FDS_PER_RANK * nproc + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard == resource.RLIM_INFINITY or hard >= needed:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        else:
            raise LaunchError(
                f"--nproc {nproc} needs about {needed} open files in the launcher, but this "
                f"shell allows {soft} (at most {hard}); raise it with `ulimit -n {needed}`, "
                f"or start fewer processes."
            )


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _raise_preempted(signum, frame):
    raise Preempted


def _ignore_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


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
        "--gpus-per-process",
        type=int,
        default=None,
        help="NVIDIA GPUs each process is given (JAX_LOCAL_DEVICE_IDS). By default, on a "
        "machine with GPUs, the visible GPUs are split evenly: with --nproc equal to their "
        "number, one each, as torchrun's LOCAL_RANK convention gives",
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
    parser.add_argument(
        "--term-grace",
        type=float,
        default=TERM_GRACE_SECONDS,
        help="after a SIGTERM (a scheduler's preemption notice, passed on to every rank), "
        "seconds the ranks have to save and exit before they are killed",
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
        term_grace=ns.term_grace,
        gpus_per_process=ns.gpus_per_process,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return launch(parse_args(argv))
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
