"""Snippet processes forked from one that has imported JAX, Flax and Optax already.

Each snippet runs in a process of its own, as ``python snippet.py`` would. Starting Python
and importing JAX, Flax and Optax costs about 1 CPU-s, a quarter of what a typical snippet
costs in all. Instead, a fork server (:mod:`multiprocessing`'s) imports them once and forks
one child per run. Nothing has created a device, a backend or a thread at that point, so
forking is safe. The server is started with the environment the snippets run with, since
JAX reads its ``JAX_*`` variables at import.

Each child gets the environment, working folder, standard output and error of its own run.
It ends the way an interpreter does (non-daemon threads joined, then ``atexit``
functions), so what it prints and its exit status are those of a fresh process. A run
whose environment differs in more than ``PER_RUN`` from the server's gets a fresh
process: see :func:`run`. As with any use of :mod:`multiprocessing`, a script that runs
snippets needs an ``if __name__ == "__main__":`` guard (the tests and ``make outputs`` have
one).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import subprocess
import sys
import tempfile
import threading
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

_server_environment: dict[str, str] | None = None
_lock = threading.Lock()


def run(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float, server: dict[str, str]
) -> subprocess.CompletedProcess:
    """``python -m sitetools.snippets`` + ``command`` in a child of the fork server, like
    ``subprocess.run([sys.executable, "-m", "sitetools.snippets", *command], env=env,
    cwd=cwd, capture_output=True, text=True, timeout=timeout)``. The server is started
    with the environment ``server`` on the first call; a run whose ``env`` differs from it in
    more than ``PER_RUN`` gets exactly that ``subprocess.run`` instead.
    """
    if _without_per_run(env) != _start_server(server):
        return subprocess.run(
            [sys.executable, "-m", "sitetools.snippets", *command],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    context = multiprocessing.get_context("forkserver")
    with tempfile.TemporaryDirectory(prefix="prestarted-") as folder:
        streams = Path(folder) / "stdout", Path(folder) / "stderr"
        for path in streams:  # there even if the child fails before it opens them
            path.touch()
        child = context.Process(target=_child, args=(command, env, str(cwd), *map(str, streams)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(command, timeout)
        stdout, stderr = (path.read_text(encoding="utf-8", errors="replace") for path in streams)
    if child.exitcode != 0 and not stdout + stderr:
        stderr = (
            f"the fork server's child for {command} ended with status {child.exitcode} "
            f"before it ran anything; its traceback went to the fork server's standard error. "
            f"(A script that runs snippets needs an `if __name__ == '__main__':` guard, as "
            f"every program that starts processes with multiprocessing does.)"
        )
    return subprocess.CompletedProcess(command, child.exitcode, stdout, stderr)


def _without_per_run(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in PER_RUN}


def _start_server(env: dict[str, str]) -> dict[str, str]:
    """The environment of the fork server, started with ``env`` if it was not yet."""
    global _server_environment
    with _lock:
        if _server_environment is None:
            multiprocessing.set_forkserver_preload(PRELOADED)
            with _environment(_without_per_run(env)):
                multiprocessing.forkserver.ensure_running()
            _server_environment = _without_per_run(env)
        return _server_environment


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


def _child(command: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> None:
    """In the forked child: become the run's process, run the command, end as Python does."""
    import jax  # preloaded: nothing to import

    from sitetools import snippets  # imported here: the server preloads only PRELOADED

    os.environ.clear()
    os.environ.update(env)
    for variable, option in JAX_OPTIONS.items():
        jax.config.update(option, env.get(variable, "").lower() in ("1", "true", "yes", "on"))
    tempfile.tempdir = None  # found again, from this run's TMPDIR
    os.chdir(cwd)
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.path.insert(0, cwd)  # as `python -m` does
    try:
        status = snippets.main(command)
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 1
    threading._shutdown()  # what the interpreter does at exit, in its order
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
