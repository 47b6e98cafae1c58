"""The rank side of ``python -m jaxpar.launch``: run the script, and fail fast.

The launcher starts every rank as ``python -m jaxpar._rank SCRIPT ARGS``, which runs
``SCRIPT`` as ``__main__`` just as ``python SCRIPT ARGS`` would. What differs is how a rank
ends. Once ``jax.distributed`` is initialised, a plain Python exit runs JAX's shutdown
barrier, which waits for every other rank (5 minutes by default) and then aborts with C++
stack traces: a rank whose script raised would hang the whole run. Here, when a script
raises or exits with a non-zero status, the runner tells the launcher (through the socket
the launcher passed, so that the launcher mutes the other ranks before they notice
anything), then prints the traceback, once (of several ranks failing at once, the launcher
shows only the first one's), and leaves at once with ``os._exit``,
skipping the barrier. A script
that succeeds says so and exits normally, through the barrier, as every rank arrives there.
A rank that dies without a word (a signal, a crash in native code) closes the socket as it
dies, which is how the launcher learns of it before the other ranks react. The other way
round, a rank whose launcher dies (killed by the OOM killer or a scheduler) sees the socket
close, and ends itself and its children.

Started by hand, without the launcher's socket, it only runs the script.
"""

from __future__ import annotations

import fcntl
import os
import runpy
import signal
import sys
import threading
import traceback
from pathlib import Path
from types import TracebackType

ENV_CONTROL_FD = "JAXPAR_CONTROL_FD"
ACK_TIMEOUT = 5.0
HIGH_FD = 1000  # below the usual limit of 1024 open files


def exit_status(code: object) -> int:
    """The process exit status ``sys.exit(code)`` gives; prints a message code as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def script_frames(tb: TracebackType | None, script: Path) -> TracebackType | None:
    """The traceback from the script's first frame on, without this runner's and runpy's."""
    rest = tb
    while rest is not None and Path(rest.tb_frame.f_code.co_filename).resolve() != script:
        rest = rest.tb_next
    return rest or tb


_answered = threading.Event()


def control_fd() -> int | None:
    """The socket to the launcher, if this rank has one."""
    fd = os.environ.get(ENV_CONTROL_FD)
    return None if fd is None else int(fd)


def watch_launcher(fd: int) -> None:
    """Note the launcher's answers; when the launcher is gone, end this rank's process group
    (the rank and its children), as the launcher itself would have."""
    while True:
        try:
            answer = os.read(fd, 1)
        except OSError:
            answer = b""
        if not answer:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        _answered.set()


def tell_launcher(message: str, wait_for_answer: bool = False) -> None:
    """Send ``message`` to the launcher, if there is one; optionally wait until it has heard.

    The socket stays open until the process ends: its closing tells the launcher the rank
    is gone.
    """
    fd = control_fd()
    if fd is None:
        return
    try:
        os.write(fd, f"{message}\n".encode())
    except OSError:
        return  # the launcher is gone: carry on all the same
    if wait_for_answer:
        _answered.wait(ACK_TIMEOUT)


def report_failure(status: int) -> None:
    """Flush what the script printed, and tell the launcher this rank fails with ``status``;
    return once it has heard."""
    sys.stdout.flush()
    sys.stderr.flush()
    tell_launcher(f"fail {status}", wait_for_answer=True)


def leave(status: int) -> None:
    """Flush, and exit without atexit handlers (JAX's shutdown barrier among them)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def fail(status: int) -> None:
    """Report the failure, and exit without atexit handlers."""
    report_failure(status)
    leave(status)


def run(script: str, args: list[str]) -> None:
    """Run ``script`` as ``__main__`` with ``args``, as ``python script args`` would (which
    also names the file in tracebacks as it was given)."""
    path = Path(script).resolve()
    fd = control_fd()
    if fd is not None:
        # A high descriptor, closed on exec: when a process dies, Linux releases its sockets
        # from the highest descriptor down, so the launcher hears of the death before any
        # peer can, through the sockets JAX opens later, at lower numbers.
        try:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
            os.close(fd)
        except OSError:  # a limit of open files under HIGH_FD: keep the one we have
            high = fd
            os.set_inheritable(fd, False)
        os.environ[ENV_CONTROL_FD] = str(high)
        threading.Thread(target=watch_launcher, args=(high,), daemon=True).start()
    sys.argv = [script, *args]
    sys.path[0] = str(path.parent)  # `-m` put the working directory there; a script has its own
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as error:
        status = exit_status(error.code)
        if status != 0:
            fail(status)
        tell_launcher("done")
        raise
    except BaseException as error:  # noqa: BLE001 - reported like Python's own handler
        # Report first, print after: once the launcher has heard of the first failing rank,
        # it shows only that rank's output, so of several ranks failing at once, one
        # traceback appears.
        status = 130 if isinstance(error, KeyboardInterrupt) else 1
        report_failure(status)
        traceback.print_exception(
            type(error), error, script_frames(error.__traceback__, path), file=sys.stderr
        )
        leave(status)
    tell_launcher("done")


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2:])
