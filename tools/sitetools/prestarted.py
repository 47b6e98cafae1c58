"""Snippet processes forked from one that has imported JAX, Flax and Optax already.

Each snippet runs in a process of its own, as ``python snippet.py`` would. Starting Python
and importing JAX, Flax and Optax costs about 1 CPU-s, a quarter of what a typical snippet
costs in all. Instead, a fork server (:mod:`multiprocessing`'s) imports them once and forks
one child per run. Nothing has created a device, a backend or a thread of Python's at that
point, so forking is safe. The server is started with the environment the snippets run
with, since JAX reads its ``JAX_*`` variables at import; if it dies, it is started again
with the same environment.

Each child gets the working folder, standard output and error, and the ``PER_RUN``
variables of its own run, and ``multiprocessing``'s default way of starting processes. It
ends the way an interpreter does (an uncaught exception's traceback, non-daemon threads
joined, then ``atexit`` functions), so what it prints and its exit status are those of a
fresh process. A run whose environment differs from the server's in more than ``PER_RUN``
gets a fresh process: see :func:`run`. As with any use of :mod:`multiprocessing`, a script
that runs snippets needs an ``if __name__ == "__main__":`` guard (the tests and
``make outputs`` have one).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

PRELOADED = ["numpy", "jax", "jax.numpy", "flax.nnx", "optax", "sklearn.datasets"]
# JAX reads its JAX_* variables when it is imported, so a child applies those of its own
# run that may differ from the server's itself.
JAX_OPTIONS = {"JAX_DISABLE_MOST_OPTIMIZATIONS": "jax_disable_most_optimizations"}
# What may differ between the server's environment and a run's: each run's own temporary
# folder, the name of the test that runs it (pytest sets it for each test), the device count
# sitetools.snippets reads when a run starts, and JAX_OPTIONS.
PER_RUN = {"TMPDIR", "PYTEST_CURRENT_TEST", "SITETOOLS_DEVICE_COUNT", *JAX_OPTIONS}
TRUE, FALSE = {"1", "y", "yes", "t", "true", "on"}, {"0", "n", "no", "f", "false", "off"}

# multiprocessing's start() reaps other threads' children, and two threads that poll the
# same child can lose its exit status: starting and reaping happen under this lock.
_lock = threading.Lock()


def run(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float, server: dict[str, str]
) -> subprocess.CompletedProcess:
    """``python -m sitetools.snippets`` + ``command`` in a child of the fork server, like
    ``subprocess.run([sys.executable, "-m", "sitetools.snippets", *command], env=env,
    cwd=cwd, capture_output=True, text=True, timeout=timeout)``. The server runs with the
    environment ``server``; a run whose ``env`` differs from it in more than ``PER_RUN``
    gets exactly that ``subprocess.run`` instead.
    """
    server = _without_per_run(server)
    if _without_per_run(env) != server:
        return subprocess.run(
            [sys.executable, "-m", "sitetools.snippets", *command],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    run_only = {name: env[name] for name in PER_RUN if name in env}
    with tempfile.TemporaryDirectory(prefix="prestarted-") as folder:
        streams = Path(folder) / "stdout", Path(folder) / "stderr"
        for path in streams:  # there even if the child fails before it opens them
            path.touch()
        child = _started((command, run_only, str(cwd), *map(str, streams)), server)
        ended = multiprocessing.connection.wait([child.sentinel], timeout)
        with _lock:
            if not ended:
                child.kill()
            child.join()
        stdout, stderr = (path.read_text(encoding="utf-8", errors="replace") for path in streams)
    if not ended:
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    if child.exitcode != 0 and not stdout + stderr:
        stderr = (
            f"the fork server's child for {command} ended with status {child.exitcode} "
            f"before it ran anything; its traceback went to the fork server's standard error. "
            f"(A script that runs snippets needs an `if __name__ == '__main__':` guard, as "
            f"every program that starts processes with multiprocessing does.)"
        )
    return subprocess.CompletedProcess(command, child.exitcode, stdout, stderr)


def _started(arguments: tuple, server: dict[str, str]) -> multiprocessing.Process:
    """A child of the fork server, started. The server is started (again, if it died) by
    ``start()``, with ``os.environ``: here, ``server``. One that is dying and not yet gone
    closes the connection: then the start is tried again."""
    tries = 3
    while True:
        child = multiprocessing.get_context("forkserver").Process(target=_child, args=arguments)
        try:
            with _lock, _environment(server):
                multiprocessing.set_forkserver_preload(PRELOADED)
                child.start()
            return child
        except (EOFError, ConnectionError):
            tries -= 1
            if not tries:
                raise
            time.sleep(0.2)


def _without_per_run(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in PER_RUN}


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside the block (the fork server copies it at its start)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _child(command: list[str], run_only: dict[str, str], cwd: str, stdout: str, stderr: str):
    """In the forked child: become the run's process, run the command, end as Python does."""
    import jax  # preloaded: nothing to import

    from sitetools import snippets  # imported here: the server preloads only PRELOADED

    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, stdout), (2, stderr)):  # sys.stdout and sys.stderr write to them
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    # The server's environment, with what its imports set (JAX sets TF_CPP_MIN_LOG_LEVEL),
    # and this run's own values of PER_RUN.
    for name in PER_RUN:
        os.environ.pop(name, None)
    os.environ.update(run_only)
    for variable, option in JAX_OPTIONS.items():
        value = os.environ.get(variable, "false").lower()
        if value not in TRUE | FALSE:
            raise ValueError(f"{variable}={value!r}: not a value JAX reads as true or false")
        jax.config.update(option, value in TRUE)
    tempfile.tempdir = None  # found again, from this run's TMPDIR
    multiprocessing.set_start_method(None, force=True)  # the default, not the fork server
    os.chdir(cwd)
    sys.path.insert(0, cwd)  # as `python -m` does
    try:
        status = snippets.main(command)
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        if not isinstance(exit.code, int | None):
            print(exit.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would
        traceback.print_exc()
        status = 1
    threading._shutdown()  # what the interpreter does at exit, in its order
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
