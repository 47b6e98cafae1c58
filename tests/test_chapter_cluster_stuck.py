"""A rank that is alive but stuck (docs/en/cluster/stuck-ranks.md): what the recording of
stuck_rank.py shows (test_snippets.py runs it again and compares), and jaxpar's barrier
and program check, in one process and in two."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from sitetools import REPO
from sitetools.snippets import read_sections

from jaxpar import barrier, check_same_program
from jaxpar.programs import signature

SNIPPETS = REPO / "snippets" / "cluster"
RECORDED = read_sections((SNIPPETS / "stuck_rank.out").read_text(encoding="utf-8"))
TASK = (SNIPPETS / "stuck_task.py").read_text(encoding="utf-8").splitlines()
PAGE = (REPO / "docs/en/cluster/stuck-ranks.md").read_text(encoding="utf-8")


def lines_of(case: str, who: str) -> list[str]:
    prefix = f"[{who}] "
    return [line[len(prefix) :] for line in RECORDED[case].splitlines() if line.startswith(prefix)]


def line_number(fragment: str) -> int:
    """The line of stuck_task.py that holds ``fragment`` (once)."""
    found = [number for number, line in enumerate(TASK, start=1) if fragment in line]
    assert len(found) == 1, (fragment, found)
    return found[0]


def test_a_stuck_rank_holds_the_others_until_stopped():
    assert RECORDED["hang"].startswith("exit status 130\n")  # Ctrl-C, after both dumps
    for rank in ("rank 0", "rank 1"):  # step 0 ran; step 1 never finished in either rank
        assert [line for line in lines_of("hang", rank) if "loss" in line] == [
            "step 0: loss 1.0000, global batch of 8 rows"
        ]
    assert lines_of("hang", "launch") == ["interrupted; stopping every rank."]


def test_the_stack_dumps_name_the_stuck_function_and_the_waiting_line():
    sleep = line_number("time.sleep(60)")
    load = line_number("local = load_batch(step)")
    run = line_number("value = lowered.compile()(batch)")
    for case in ("hang", "timeout", "barrier"):
        stuck = lines_of(case, "rank 1")
        assert stuck[1:] == [
            "Timeout (0:00:02)!",
            f'  File "stuck_task.py", line {sleep} in load_batch',
            f'  File "stuck_task.py", line {load} in <module>',
        ]
    waiting = lines_of("hang", "rank 0")
    assert waiting[1:] == ["Timeout (0:00:02)!", f'  File "stuck_task.py", line {run} in <module>']


def test_xla_cpus_collective_timeout_ends_the_wait_without_naming_the_rank():
    assert RECORDED["timeout"].startswith("exit status 1\n")
    run = line_number("value = lowered.compile()(batch)")
    rank0 = lines_of("timeout", "rank 0")
    assert rank0[1:3] == ["Timeout (0:00:02)!", f'  File "stuck_task.py", line {run} in <module>']
    assert f'  File "stuck_task.py", line {run}, in <module>' in rank0  # the traceback
    assert rank0[-1].startswith("jax.errors.JaxRuntimeError: UNKNOWN: Gloo all-reduce failed")
    assert rank0[-1].endswith("Timed out waiting 4000ms for recv operation to complete")
    assert lines_of("timeout", "launch") == [
        "rank 0 exited with status 1; stopping the other ranks."
    ]
    assert "--xla_cpu_collective_timeout_seconds=4" in (SNIPPETS / "stuck_rank.py").read_text(
        encoding="utf-8"
    )


def test_the_barrier_turns_the_hang_into_an_error_naming_the_stuck_rank():
    assert RECORDED["barrier"].startswith("exit status 1\n")
    rank0 = lines_of("barrier", "rank 0")
    assert rank0[-1] == (
        "jaxpar.barriers.BarrierTimeoutError: rank 0 waited 4 s at barrier 'step' for "
        "ranks [1], which never arrived: look at what they were doing (their stacks)."
    )
    assert f'  File "stuck_task.py", line {line_number("timeout_s=4")}, in <module>' in rank0
    assert lines_of("barrier", "launch") == [
        "rank 0 exited with status 1; stopping the other ranks."
    ]


def test_named_barriers_with_different_names_fail_in_every_rank():
    for rank, name in ((0, "after load"), (1, "after save")):
        [line] = lines_of("names", f"rank {rank}")
        assert line.startswith(f"AssertionError: sync_global_devices name mismatch ('{name}')")


def test_uneven_batches_run_without_an_error_and_the_ranks_disagree():
    assert RECORDED["uneven"].startswith("exit status 0\n")
    losses = [re.search(r"loss ([\d.]+)", lines_of("uneven", f"rank {r}")[0])[1] for r in (0, 1)]
    assert losses == ["0.8750", "1.1667"]  # 14 ones over 16 and over 12 elements; truly 1.0
    assert 14 / 16 == 0.875 and f"{14 / 12:.4f}" == "1.1667"


def test_the_program_check_catches_the_uneven_batch_before_running_in_every_rank():
    errors = [lines_of("checked", f"rank {r}") for r in (0, 1)]
    assert errors[0] == errors[1]  # every rank gathered every rank's program
    assert errors[0][0].startswith("ProgramMismatchError: the ranks compiled 2 different programs")
    assert errors[0][1:3] == [
        "  ranks [0]: arguments float32[8,2]",
        "  ranks [1]: arguments float32[6,2]",
    ]
    assert "step 0:" not in RECORDED["checked"]  # the step never ran


def test_the_tasks_own_recording_is_what_stuck_rank_shows_for_a_normal_step():
    task = read_sections((SNIPPETS / "stuck_task.out").read_text(encoding="utf-8"))
    assert task == {"preamble": "step 0: loss 1.0000, global batch of 8 rows\n"}
    assert "[rank 0] step 0: loss 1.0000, global batch of 8 rows" in RECORDED["hang"]


def test_the_page_states_the_recorded_numbers():
    assert "stuck_rank.out:hang" in PAGE and "stuck_rank.out:checked" in PAGE
    assert "stuck_rank.out:timeout" in PAGE
    for number in ("0.8750", "1.1667", "status 130", "4 s", "2 s", "1800 s", "100 s"):
        assert number in PAGE, number


# jaxpar's helpers in one process (the recordings above show them across two).


def test_check_same_program_in_one_process_has_nothing_to_compare():
    lowered = jax.jit(lambda x: jnp.mean(x**2)).lower(jnp.ones((8, 2)))
    check_same_program(lowered, "the loss")
    check_same_program(lowered.compile(), "the loss")
    assert signature(lowered) == "float32[8,2]"


def test_check_same_program_refuses_a_function_that_was_not_lowered():
    with pytest.raises(TypeError, match=r"jax.jit\(f\).lower\(\*args\).*got function"):
        check_same_program(jnp.mean)


def test_barrier_in_one_process_returns_and_refuses_a_bad_timeout():
    barrier("start", timeout_s=1)
    with pytest.raises(ValueError, match="timeout_s must be positive, got 0"):
        barrier("start", timeout_s=0)


TWO_RANKS = textwrap.dedent(
    """
    import time
    import jax
    from jaxpar import initialize_distributed
    initialize_distributed()
    import jax.numpy as jnp
    from jaxpar import BarrierTimeoutError, barrier, check_same_program
    rank = jax.process_index()
    check_same_program(jax.jit(jnp.sin).lower(jnp.ones(3)), "sin")  # the same: passes
    barrier("in time", timeout_s=30)
    barrier("in time", timeout_s=30)  # a name may be used again, and again
    barrier("in time", timeout_s=30)
    if rank == 1:
        time.sleep(2)
    try:
        barrier("late", timeout_s=0.5)
    except BarrierTimeoutError as error:
        print(error)
    """
)


def test_two_ranks_same_program_passes_and_a_late_rank_is_told_it_is_the_slow_one(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(TWO_RANKS, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "jaxpar.launch", "--nproc", "2", "--devices-per-process", "1"]
        + ["--timeout", "60", str(script)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "[rank 0] rank 0 waited 0.5 s at barrier 'late' for ranks [1], which never arrived"
        in done.stdout
    )
    assert (
        "[rank 1] rank 1 reached barrier 'late' after the other ranks had waited 0.5 s for it "
        "and given up: this rank is the slow one." in done.stdout
    )
