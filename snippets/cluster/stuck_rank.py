"""A rank that is alive but stuck, and ranks that run different programs: what happens, and jaxpar's checks.

Runs `stuck_task.py` (beside it) under `python -m jaxpar.launch --nproc 2` once per case,
all at the same time (the `hang` case twice: once more with XLA:CPU's collective timeout
cut to 4 s), and prints what each rank wrote, rank by rank: the launcher interleaves the
ranks' lines as they come. Stack dumps keep only the frames of
`stuck_task.py` (a real dump also shows JAX's, the runner's and every other thread's), and
tracebacks the script's lines.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% launch
# --8<-- [start:launch]
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

# stuck_task.py lies next to this file (in a notebook: in the current folder).
TASK = Path(globals().get("__file__", "stuck_task.py")).resolve().parent / "stuck_task.py"


def launch(case: str, xla_flags: str = "") -> subprocess.Popen:
    """Start `XLA_FLAGS=... python -m jaxpar.launch --nproc 2 ... stuck_task.py CASE`, as a
    reader would; every rank inherits the launcher's environment, XLA_FLAGS included."""
    command = [sys.executable, "-m", "jaxpar.launch", "--nproc", "2"]
    command += ["--devices-per-process", "1", "--timeout", "60", TASK.name, case]
    env = dict(os.environ)
    if xla_flags:  # after the flags already set, if any
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    return subprocess.Popen(command, cwd=TASK.parent, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def interrupt_after_dumps(run: subprocess.Popen, dumps: int = 2) -> str:
    """Read the run's output until `dumps` stack dumps have reached the script's top level
    (a dump's frame `File "stuck_task.py", line N in <module>`), then press Ctrl-C (SIGINT
    to the launcher), as you would once the stacks are in the log."""
    top = re.compile(re.escape(TASK.name) + r'", line \d+ in <module>')
    lines = []
    for line in run.stdout:
        lines.append(line)
        if sum(bool(top.search(seen)) for seen in lines) == dumps:
            run.send_signal(signal.SIGINT)
            break
    return "".join(lines) + run.stdout.read()


def show(run: subprocess.Popen, output: str | None = None) -> None:
    """Print the run's exit status, then each rank's lines, then the launcher's."""
    if output is None:
        output = run.communicate(timeout=120)[0]
    run.wait(timeout=120)
    print(f"exit status {run.returncode}")
    by_rank: dict[str, list[str]] = {}
    keep_source = False
    for line in output.splitlines():
        if re.search(r"\[Gloo\]|connected peer ranks", line):  # Gloo's log of connections
            continue
        who, _, text = line.partition("] ")
        if text.startswith("  File "):  # a frame: only the script's own
            keep_source = TASK.name in text
            if keep_source:
                by_rank.setdefault(who + "]", []).append(text)
            continue
        if text.startswith("    ") or not text.strip() or re.match(r"(Current t|T)hread 0x", text):
            if keep_source and text.strip() and not set(text.strip()) <= set("^~"):
                by_rank[who + "]"].append(text)  # the source line of the script's frame
            continue
        keep_source = False
        by_rank.setdefault(who + "]", []).append(text)
    for who in sorted(by_rank, key=lambda who: (who == "[launch]", who)):  # the launcher's last
        for text in by_rank[who]:
            print(f"{who} {text}")


# Every case at once: each mostly waits.
runs = {case: launch(case) for case in ("hang", "barrier", "names", "uneven", "checked")}
# The same stuck rank, with XLA:CPU's collective timeout cut from 30 minutes to 4 s.
runs["timeout"] = launch("hang", xla_flags="--xla_cpu_collective_timeout_seconds=4")
# --8<-- [end:launch]

# %% hang
# --8<-- [start:hang]
show(runs["hang"], interrupt_after_dumps(runs["hang"]))
# --8<-- [end:hang]

# %% timeout
# --8<-- [start:timeout]
show(runs["timeout"])
# --8<-- [end:timeout]

# %% barrier
# --8<-- [start:barrier]
show(runs["barrier"])
# --8<-- [end:barrier]

# %% names
# --8<-- [start:names]
show(runs["names"])
# --8<-- [end:names]

# %% uneven
# --8<-- [start:uneven]
show(runs["uneven"])
# --8<-- [end:uneven]

# %% checked
# --8<-- [start:checked]
show(runs["checked"])
# --8<-- [end:checked]
