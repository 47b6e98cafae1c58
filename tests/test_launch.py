"""The local launcher: output, failures, timeouts, interrupts, bad input, and no orphans."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jaxpar.launch import EXIT_INTERRUPTED, EXIT_TIMEOUT


def script(tmp_path: Path, source: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def launch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jaxpar.launch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


# A rank that records its pid and a grandchild's, so the tests can look for orphans.
RECORD_PIDS = """
    import os, subprocess, sys, time
    rank = int(os.environ["JAXPAR_PROCESS_ID"])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    path = os.path.join(sys.argv[1], f"pids-{rank}")
    with open(path + ".part", "w") as f:  # then renamed: a reader never sees it half written
        f.write(f"{os.getpid()} {child.pid}")
    os.replace(path + ".part", path)
"""


def recorded_pids(folder: Path, ranks: int) -> list[int]:
    deadline = time.monotonic() + 30
    while len(list(folder.glob("pids-[0-9]"))) < ranks and time.monotonic() < deadline:
        time.sleep(0.05)
    return [int(pid) for path in folder.glob("pids-[0-9]") for pid in path.read_text().split()]


def test_every_rank_gets_its_environment_and_a_prefix(tmp_path):
    job = script(
        tmp_path,
        """
        import os
        env = {k: v for k, v in os.environ.items() if k.startswith(("JAXPAR_", "JAX_NUM", "JAX_PLAT"))}
        print(sorted(env.items()))
        """,
    )
    result = launch(
        "--nproc", "3", "--devices-per-process", "2", "--port", str(_free_port()), str(job)
    )
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert [line.split("]")[0] for line in lines] == ["[rank 0", "[rank 1", "[rank 2"]
    for rank, line in enumerate(lines):
        assert f"('JAXPAR_PROCESS_ID', '{rank}')" in line
        assert "('JAXPAR_NUM_PROCESSES', '3')" in line
        assert "('JAX_NUM_CPU_DEVICES', '2')" in line
        assert "('JAXPAR_COORDINATOR', '127.0.0.1:" in line


def test_script_arguments_are_passed_through(tmp_path):
    job = script(tmp_path, "import sys; print(sys.argv[1:])")
    result = launch("--nproc", "1", str(job), "--steps", "3", "x")
    assert result.stdout.strip() == "[rank 0] ['--steps', '3', 'x']"


def test_a_failing_rank_stops_the_others_and_sets_the_exit_status(tmp_path):
    job = script(
        tmp_path,
        RECORD_PIDS
        + """
    if rank == 1:  # fail once every rank has started (and recorded its pids)
        while len([n for n in os.listdir(sys.argv[1]) if n.startswith("pids-")]) < 3:
            time.sleep(0.05)
        raise SystemExit(3)
    time.sleep(600)
    """,
    )
    started = time.monotonic()
    result = launch("--nproc", "3", str(job), str(tmp_path))
    assert result.returncode == 3
    assert "rank 1 exited with status 3; stopping the other ranks" in result.stdout
    assert time.monotonic() - started < 60
    pids = recorded_pids(tmp_path, 3)
    assert len(pids) == 6 and not any(alive(pid) for pid in pids)


def test_a_crash_shows_the_traceback_with_its_rank(tmp_path):
    job = script(tmp_path, "import os\nif os.environ['JAXPAR_PROCESS_ID'] == '0':\n    1 / 0\n")
    result = launch("--nproc", "2", str(job))
    assert result.returncode == 1
    assert "[rank 0] ZeroDivisionError: division by zero" in result.stderr


def test_a_hanging_rank_is_stopped_by_the_timeout(tmp_path):
    job = script(tmp_path, RECORD_PIDS + "\n    time.sleep(600)\n")
    result = launch("--nproc", "2", "--timeout", "3", str(job), str(tmp_path))
    assert result.returncode == EXIT_TIMEOUT
    assert "timeout: ranks [0, 1] still running after 3 s" in result.stdout
    pids = recorded_pids(tmp_path, 2)
    assert len(pids) == 4 and not any(alive(pid) for pid in pids)


def test_ctrl_c_stops_every_rank(tmp_path):
    job = script(tmp_path, RECORD_PIDS + "\n    time.sleep(600)\n")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "jaxpar.launch", "--nproc", "2", str(job), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = recorded_pids(tmp_path, 2)
    launcher.send_signal(signal.SIGINT)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == EXIT_INTERRUPTED
    assert "interrupted; stopping every rank" in out
    assert len(pids) == 4 and not any(alive(pid) for pid in pids)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "0", "job.py"], "--nproc must be at least 1, got 0"),
        (["--nproc", "2", "missing.py"], "the script missing.py does not exist"),
        (
            ["--nproc", "2", "--devices-per-process", "0", "job.py"],
            "--devices-per-process must be at least 1, got 0",
        ),
    ],
)
def test_bad_input_is_refused_with_a_message(tmp_path, args, message):
    script(tmp_path, "print('never runs')")
    result = subprocess.run(
        [sys.executable, "-m", "jaxpar.launch", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "never runs" not in result.stdout


def test_a_port_in_use_is_refused(tmp_path):
    job = script(tmp_path, "print('never runs')")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = launch("--nproc", "2", "--port", str(port), str(job))
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--port" in result.stderr


def test_two_processes_form_one_eight_device_system(tmp_path):
    job = script(
        tmp_path,
        """
        from jaxpar.distributed import initialize_distributed
        initialize_distributed()
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((8,), ("data",))
        local = jnp.arange(4.0) + 4 * jax.process_index()
        batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local)
        total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(batch)
        print(jax.process_count(), jax.device_count(), jax.local_device_count(), float(total))
        """,
    )
    result = launch("--nproc", "2", "--devices-per-process", "4", "--timeout", "120", str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    # Gloo, the CPU collectives library, logs its connections to standard output, from
    # several threads at once, so that a log line sometimes arrives in pieces.
    printed = re.compile(r"^\[rank \d\] \d+ \d+ \d+ [\d.]+$")
    outputs = sorted(line for line in result.stdout.splitlines() if printed.match(line))
    assert outputs == ["[rank 0] 2 8 4 28.0", "[rank 1] 2 8 4 28.0"]


def test_initialize_outside_the_launcher_explains_how_to_launch(tmp_path):
    job = script(
        tmp_path,
        "from jaxpar.distributed import initialize_distributed\ninitialize_distributed()\n",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPAR_")}
    result = subprocess.run(
        [sys.executable, str(job)], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode != 0
    assert "NotLaunchedError" in result.stderr
    assert "python -m jaxpar.launch --nproc 2" in result.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_initialize_refuses_what_the_launcher_sets(monkeypatch):
    from jaxpar.distributed import initialize_distributed

    monkeypatch.setenv("JAXPAR_COORDINATOR", "127.0.0.1:1")
    with pytest.raises(TypeError) as caught:
        initialize_distributed(process_id=3, heartbeat_timeout_seconds=5)
    message = str(caught.value)
    assert "process_id" in message and "python -m jaxpar.launch sets" in message
    assert "leave it out" in message


def test_ranks_end_when_the_launcher_is_killed(tmp_path):
    """The OOM killer or a scheduler may SIGKILL the launcher itself: its ranks, and their
    children, must not run on."""
    job = script(tmp_path, RECORD_PIDS + "\n    time.sleep(600)\n")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "jaxpar.launch", "--nproc", "2", str(job), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids = recorded_pids(tmp_path, 2)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 4 and not any(alive(pid) for pid in pids)


SHOW_GPUS = """
    import os
    print(os.environ["JAXPAR_PROCESS_ID"], os.environ.get("JAX_LOCAL_DEVICE_IDS"))
"""


@pytest.mark.parametrize(
    ("args", "shares"),
    [
        (["--nproc", "4"], ["0", "1", "2", "3"]),  # one GPU each, as torchrun gives
        (["--nproc", "2"], ["0,1", "2,3"]),
        (["--nproc", "1"], ["0,1,2,3"]),  # JAX's usual layout: one process, all GPUs
        (["--nproc", "2", "--gpus-per-process", "1"], ["0", "1"]),
        (["--nproc", "2", "--devices-per-process", "2"], ["None", "None"]),  # simulated CPUs
    ],
)
def test_on_a_machine_with_gpus_each_rank_is_given_its_share(tmp_path, monkeypatch, args, shares):
    """No GPU here: CUDA_VISIBLE_DEVICES makes the launcher see 4, and each rank prints the
    JAX_LOCAL_DEVICE_IDS that jax.distributed.initialize would restrict it to."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    job = script(tmp_path, SHOW_GPUS)
    result = launch(*args, str(job))
    assert result.returncode == 0, result.stderr
    told = dict(line.split("] ", 1)[1].split() for line in result.stdout.splitlines())
    assert [told[str(rank)] for rank in range(len(shares))] == shares


@pytest.mark.parametrize(
    ("visible", "args", "message"),
    [
        (
            "0,1,2,3",
            ["--nproc", "3"],
            "3 processes cannot share the 4 visible GPUs evenly; start 4",
        ),
        ("0,1,2,3", ["--nproc", "2", "--gpus-per-process", "3"], "with --gpus-per-process 3"),
        ("", ["--nproc", "2", "--gpus-per-process", "1"], "but no NVIDIA GPU is visible"),
        (
            "0,1",
            ["--nproc", "2", "--gpus-per-process", "1", "--devices-per-process", "2"],
            "--gpus-per-process and --devices-per-process exclude each other",
        ),
        (
            "0,1",
            ["--nproc", "2", "--gpus-per-process", "0"],
            "--gpus-per-process must be at least 1",
        ),
    ],
)
def test_gpus_that_do_not_split_are_refused_with_the_fix(
    tmp_path, monkeypatch, visible, args, message
):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    job = script(tmp_path, SHOW_GPUS)
    result = launch(*args, str(job))
    assert result.returncode == 2 and message in result.stderr, result.stderr
