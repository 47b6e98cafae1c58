"""The checkpoints chapter's claims: what a 2-process Orbax checkpoint holds, how Grain splits
and orders the data, runs killed in a save and in a step that resume bit for bit, damaged
checkpoints that train.py finds and passes over (or stops at), a restore into another layout
in one process, Orbax's errors, and what Grain's worker processes need, change and keep
(workers.out), with epochs and per-process shards."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sitetools import REPO
from sitetools.snippets import RUN_ENVIRONMENT, read_sections, tolerances

from jaxpar.launch import EXIT_TERMINATED, TERM_GRACE_SECONDS, parse_args

SNIPPETS = REPO / "snippets" / "checkpoints"
TRAIN = read_sections((SNIPPETS / "train.out").read_text(encoding="utf-8"))
RESUME = read_sections((SNIPPETS / "crash_and_resume.out").read_text(encoding="utf-8"))
WORKERS_OUT = read_sections((SNIPPETS / "workers.out").read_text(encoding="utf-8"))
DAMAGED = read_sections((SNIPPETS / "damaged.out").read_text(encoding="utf-8"))
DATA_PAGE = (REPO / "docs/en/checkpoints/data.md").read_text(encoding="utf-8")

# The state: the MLP's parameters (64 x 128 + 128 + 128 x 10 + 10 float32) and the momentum.
PARAMETERS = 64 * 128 + 128 + 128 * 10 + 10
STATE_BYTES = 2 * 4 * PARAMETERS


def losses(text: str) -> dict[int, str]:
    return {int(step): loss for step, loss in re.findall(r"step +(\d+)  loss (\S+)", text)}


def first_examples(text: str) -> dict[int, str]:
    found = re.findall(r"step +(\d+)  loss \S+  first example (\d+)", text)
    return {int(step): first for step, first in found}


def bytes_on_device_0(text: str) -> tuple[int, int]:
    found = re.search(r"state bytes on device 0: (\d+) of (\d+)", text)
    return int(found[1]), int(found[2])


def final_state(text: str) -> list[str]:
    return re.findall(r"final state (\w+)", text)


def logged_lines(section: str, heading: str) -> list[str]:
    """The lines of run/log.txt that crash_and_resume.py printed, indented, under ``heading``."""
    lines = section.splitlines()
    start = lines.index(heading) + 1
    end = next(
        (i for i, line in enumerate(lines[start:], start) if not line.startswith("  ")), None
    )
    return [line[2:] for line in lines[start:end]]


def test_train_out_is_what_the_crashed_and_the_resumed_run_logged():
    # train.py's recording is checked here, through crash_and_resume.py's runs of it: the
    # crashed run logged every line of an uninterrupted run up to its final state, and
    # the resumed run ended with the same description of the checkpoint.
    crashed = logged_lines(RESUME["crash"], "run/log.txt:")
    uninterrupted = "".join(TRAIN[name] for name in ("data", "checkpoints", "train"))
    assert crashed == uninterrupted.splitlines()
    assert len(TRAIN["data"].splitlines()) == 5  # "the five lines on the data" (resuming page)
    resumed = logged_lines(RESUME["resume"], "new in run/log.txt, from the restore on:")
    final_state = next(i for i, line in enumerate(resumed) if line.startswith("final state"))
    assert resumed[final_state + 1 :] == TRAIN["written"].splitlines()


def test_each_process_reads_its_own_half_of_every_batch_in_a_new_order_each_epoch():
    data = TRAIN["data"]
    first = re.findall(r"step 1, process (\d) reads examples \[([\d, ]+)\]", data)
    assert [process for process, _ in first] == ["0", "1"]
    assert first[0][1] != first[1][1]
    assert "(128 of them)" in data  # 256 // 2 processes
    assert "the two halves overlap: False" in data
    assert "epoch 0 reads each example once: True" in data  # 6 batches x 256 = 1536
    epoch_1 = re.search(r"step 7 \(epoch 1\), process 0 reads \[([\d, ]+)\]", data)[1]
    assert epoch_1 != first[0][1]  # without a new order per epoch, step 7 would repeat step 1


def test_fsdp_state_holds_an_eighth_per_device():
    on_device, total = bytes_on_device_0(TRAIN["checkpoints"])
    assert total == STATE_BYTES == 76880
    # Everything split 8 ways, except the output bias (10 values) and its momentum: whole.
    assert on_device == (STATE_BYTES - 2 * 4 * 10) // 8 + 2 * 4 * 10 == 9680


def test_every_process_writes_its_own_part_of_the_checkpoint():
    written = TRAIN["written"]
    assert "checkpoints kept: [8, 12]" in written  # every 4 steps, the last 2
    files = re.findall(r"^  (\S+)$", written, re.MULTILINE)
    for process in (0, 1):
        assert f"state/ocdbt.process_{process}/manifest.ocdbt" in files
        assert f"state/array_metadatas/process_{process}" in files
        assert f"data/process_{process}-of-2.json" in files
        assert f"data iterator of process {process}: {{'next_index': 12}}" in written
    assert {"commit_success.txt", "state/commit_success.txt", "state/manifest.ocdbt"} <= set(files)


def test_a_crash_while_saving_leaves_the_previous_checkpoints_intact():
    crash = RESUME["crash"]
    assert "train.py --workdir run --crash-in-save 12\n" in crash
    assert "[launch] rank 1 exited with status 137; stopping the other ranks." in crash
    assert "exit status 137" in crash  # 128 + SIGKILL
    assert "run/checkpoints: ['12.orbax-checkpoint-tmp', '4', '8']" in crash
    assert "latest complete checkpoint: 8" in crash
    # The run got through step 12 before it died: its last log lines are the reference.
    assert f"step 12  loss {losses(TRAIN['train'])[12]}" in crash
    assert final_state(crash) == final_state(TRAIN["train"])


def test_a_crash_in_the_middle_of_a_step_loses_only_the_steps_since_the_checkpoint():
    crash = RESUME["crash_in_step"]
    assert "train.py --workdir run --crash-in-step 10\n" in crash
    assert "[launch] rank 1 exited with status 137; stopping the other ranks." in crash
    assert "exit status 137" in crash
    # It restored step 8 and logged no step: losses are logged at the saves, the next at 12.
    assert logged_lines(crash, "new in run/log.txt, from the restore on:") == [
        "resuming after step 8",
        f"state bytes on device 0: {bytes_on_device_0(TRAIN['checkpoints'])[0]} of {STATE_BYTES}",
    ]
    # Nothing written, nothing removed: the folder is as the crash while saving left it.
    assert "run/checkpoints: ['12.orbax-checkpoint-tmp', '4', '8']" in crash
    assert "latest complete checkpoint: 8" in crash


def test_train_py_kills_process_1_straight_after_dispatching_the_step():
    # The page: the kill lands right after train_step returns, while XLA computes the step.
    lines = [line.strip() for line in (SNIPPETS / "train.py").read_text().splitlines()]
    call = lines.index("state, loss = train_step(state, x, y)")
    assert lines[call + 1] == "if step == args.crash_in_step and process == 1:"
    assert lines[call + 2].startswith("os.kill(os.getpid(), signal.SIGKILL)")


def test_the_resumed_run_repeats_steps_9_to_12_bit_for_bit():
    resume = RESUME["resume"]
    assert "new in run/log.txt, from the restore on:\n  resuming after step 8\n" in resume
    assert "exit status 0" in resume
    assert "Removing existing\n    directory since it is not finalized." in resume
    uninterrupted = losses(TRAIN["train"])
    assert sorted(uninterrupted) == list(range(1, 13))
    resumed = losses(resume)
    assert sorted(resumed) == [9, 10, 11, 12]
    # Printed with every digit of the float32: equal strings are equal bits.
    assert resumed == {step: uninterrupted[step] for step in resumed}
    assert final_state(resume) == final_state(TRAIN["train"])
    # The same data: each step's first example of process 0, and step 7 opens epoch 1.
    uninterrupted_data = first_examples(TRAIN["train"])
    assert first_examples(resume) == {step: uninterrupted_data[step] for step in resumed}
    assert f"[{uninterrupted_data[7]}," in TRAIN["data"]  # the peek at epoch 1
    compare = RESUME["compare"]
    expected = [uninterrupted[step] for step in range(9, 13)]
    assert f"steps 9-12 before the crash: {expected}" in compare
    assert f"steps 9-12 after the restart: {expected}" in compare
    assert "the same first examples: True" in compare
    assert "the same losses, bit for bit: True" in compare
    assert "the same final state, bit for bit: True" in compare


# Damaged checkpoints. Each test damages a copy of the checkpoints of one uninterrupted
# 12-step run (8 and 12) and resumes it to 12 steps: the run it must end as.
TRAIN_PY = [sys.executable, "-m", "jaxpar.launch", "--nproc", "2", "--devices-per-process", "4",
            str(SNIPPETS / "train.py")]  # fmt: skip


def train(workdir: Path, steps: int) -> tuple[int, str, str]:
    """Run train.py as a reader would: its exit status, output, and what it added to log.txt."""
    log = workdir / "log.txt"
    before = log.read_text() if log.exists() else ""
    result = subprocess.run(
        [*TRAIN_PY, "--workdir", str(workdir), "--steps", str(steps)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **RUN_ENVIRONMENT},
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr, log.read_text()[len(before) :]


@pytest.fixture(scope="module")
def uninterrupted(once_per_run) -> tuple[Path, str]:
    """A run of 12 steps, made once for every test process: its folder and log."""

    def make(folder: Path) -> str:
        status, output, logged = train(folder / "run", 12)
        assert status == 0, output
        assert sorted(p.name for p in (folder / "run" / "checkpoints").iterdir()) == ["12", "8"]
        return logged

    folder, logged = once_per_run("uninterrupted", make)
    return folder / "run", logged


@pytest.fixture
def run(uninterrupted, tmp_path) -> Path:
    """A copy of the uninterrupted run's folder, to damage."""
    return Path(shutil.copytree(uninterrupted[0], tmp_path / "run"))


def largest_data_file(workdir: Path, step: int) -> tuple[Path, str]:
    """The largest file in the d/ folders of a checkpoint, and its name as train.py logs it."""
    folder = workdir / "checkpoints" / str(step)
    largest = max(folder.glob("state/**/d/*"), key=lambda path: path.stat().st_size)
    return largest, largest.relative_to(folder).as_posix()


def flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(data)


def assert_resumed_from_8_as_the_uninterrupted_run(uninterrupted, status, output, logged):
    assert status == 0, output
    assert output.count("Traceback") == 0, output
    assert "deleting checkpoint 12; restoring checkpoint 8 instead\nresuming after step 8\n" in (
        logged
    )
    reference = uninterrupted[1]
    assert losses(logged) == {step: losses(reference)[step] for step in range(9, 13)}
    assert final_state(logged) == final_state(reference)  # parameters and momentum, bit for bit
    written = logged[logged.index("checkpoints kept") :]
    assert written == reference[reference.index("checkpoints kept") :]  # 8 and 12, at 12


def test_a_truncated_data_file_is_found_and_the_run_resumes_from_the_checkpoint_before(
    uninterrupted, run
):
    path, name = largest_data_file(run, 12)
    size = path.stat().st_size
    os.truncate(path, size // 2)
    status, output, logged = train(run, 12)
    assert f"checkpoint 12 is damaged: {name} has {size // 2} bytes, {size} when saved\n" in (
        logged
    )
    assert_resumed_from_8_as_the_uninterrupted_run(uninterrupted, status, output, logged)


def test_a_flipped_bit_is_found_and_the_run_resumes_from_the_checkpoint_before(uninterrupted, run):
    # Without sha256.json, Orbax can restore such a file without a word (OCDBT on a local
    # disk keeps no checksum), and the run goes on from other values.
    path, name = largest_data_file(run, 12)
    flip_a_bit(path)
    status, output, logged = train(run, 12)
    damage = (
        f"checkpoint 12 is damaged: {name} has changed since it was saved (its SHA-256 differs)"
    )
    assert damage + "\n" in logged
    assert_resumed_from_8_as_the_uninterrupted_run(uninterrupted, status, output, logged)


def test_when_every_checkpoint_is_damaged_the_run_stops_with_one_error(run):
    newest, newest_name = largest_data_file(run, 12)
    size = newest.stat().st_size
    os.truncate(newest, 0)
    older, older_name = largest_data_file(run, 8)
    flip_a_bit(older)
    status, output, logged = train(run, 16)
    assert status != 0, output
    assert output.count("Traceback") == 0, output  # one error line, from process 0
    assert logged.splitlines()[5:] == [  # after the lines on the data, which every start logs
        f"checkpoint 12 is damaged: {newest_name} has 0 bytes, {size} when saved",
        f"checkpoint 8 is damaged: {older_name} has changed since it was saved (its SHA-256 differs)",
    ]
    error = (
        f"error: checkpoints 12, 8 in {run / 'checkpoints'} are all damaged (above); none deleted"
    )
    assert output.count(error) == 1, output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["12", "8"]  # none deleted


def test_a_full_disk_stops_the_run_with_one_error_and_no_traceback(tmp_path):
    """Files limited to 10,000 bytes (`prlimit --fsize`: writes past it fail with EFBIG, as
    on a full disk, without root): the first save (step 4) fails in Orbax's background
    threads on both processes. train.py stops at the step after Orbax logs it, before the
    next save (step 8), with one error line per process that found it and no traceback (it
    once printed 21 to 37); nothing is left running."""
    workdir = tmp_path / "run"
    started = time.monotonic()
    result = subprocess.run(
        ["prlimit", "--fsize=10000", *TRAIN_PY, "--workdir", str(workdir), "--steps", "12"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, **RUN_ENVIRONMENT, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    took = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output and "Event loop is closed" not in output, output
    assert len(re.findall(r"^\[launch\] rank \d exited with status 1; ", output, re.M)) == 1
    errors = re.findall(rf"^\[rank (\d)\] step (\d+): a checkpoint could not be written "
                        rf"to {re.escape(str(workdir / 'checkpoints'))}: ValueError: .*File too large", output, re.M)  # fmt: skip
    # one line from each process that found the failure before the launcher stopped it
    assert errors and len({rank for rank, _ in errors}) == len(errors), output
    assert all(5 <= int(step) <= 8 for _, step in errors), output  # before the next save
    assert "Free space there (or choose another --workdir) and run again" in output
    assert not [p for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()]  # none whole
    assert not running_with(str(workdir)), "a process of the run is still running"
    # Not a timing test: a run that hung after the failure (4 in fewer than 30 did, before
    # train.py watched Orbax's log) would wait for subprocess.run's 120 s; alone the run
    # takes about 4 s.
    assert took < 90, f"{took:.1f} s"


def running_with(argument: str) -> list[int]:
    """The processes whose command line holds ``argument``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:  # ended meanwhile
            pass
    return found


def test_damaged_out_shows_a_flipped_bit_passed_over_and_an_error_when_nothing_is_intact():
    # What the resuming page quotes; the tests above check the same behaviour live.
    flipped = DAMAGED["flipped"]
    assert "exit status 0 - run/checkpoints: ['4', '8']" in flipped
    assert logged_lines(flipped, "new in run/log.txt, without the losses:") == [
        "checkpoint 8 is damaged: state/ocdbt.process_1/d/<name> has changed since it was saved"
        " (its SHA-256 differs)",
        "deleting checkpoint 8; restoring checkpoint 4 instead",
        "resuming after step 4",
        f"state bytes on device 0: 9680 of {STATE_BYTES}",
        *(f"final state {state}" for state in final_state(TRAIN["train"])),  # 12 steps, unbroken
    ]
    assert flipped.endswith("exit status 0 - run/checkpoints: ['12', '8']\n")
    nothing = DAMAGED["nothing_intact"]
    assert logged_lines(nothing, "new in run/log.txt:") == [
        "checkpoint 12 is damaged: data/process_1-of-2.json has 11 bytes, 24 when saved",
        "checkpoint 8 is damaged: state/ocdbt.process_1/d/<name> has changed since it was saved"
        " (its SHA-256 differs)",
    ]
    error = (
        "[rank 0] error: checkpoints 12, 8 in run/checkpoints are all damaged (above); none deleted"
    )
    assert nothing.count("error") == 1 and error in nothing
    assert nothing.endswith("exit status 1 - run/checkpoints: ['12', '8']\n")


def test_one_process_restores_the_two_process_checkpoint_tensor_parallel():
    elsewhere = RESUME["elsewhere"]
    assert "restored step 12 in 1 process, onto a {'data': 2, 'model': 4} mesh" in elsewhere
    assert "hidden kernel: (64, 128) P(None, 'model') on device 0: (64, 32)" in elsewhere
    on_device, total = bytes_on_device_0(elsewhere)
    # Split 4 ways over "model", copied over "data"; the output bias stays whole.
    assert total == STATE_BYTES
    assert on_device == (STATE_BYTES - 2 * 4 * 10) // 4 + 2 * 4 * 10 == 19280
    assert "the same values as the final state of train.py: True" in elsewhere


def test_orbax_errors_for_bad_restores():
    errors = RESUME["errors"]
    assert (
        "ValueError: Requested shape: (32, 128) is not compatible with the stored shape: (64,\n"
        "    128)." in errors
    )
    assert "FileNotFoundError: Checkpoint at run/checkpoints/7 not found." in errors
    assert "saved steps: [8, 12]" in errors
    assert "latest_step(): None - train.py would start from step 0" in errors
    assert "FileNotFoundError: No steps found in run/chekpoints." in errors
    assert "the mesh of its shardings: AbstractMesh" in errors
    assert "ValueError: Topology mismatch detected." in errors


def batches_of(line: str) -> list[list[int]]:
    return [[int(i) for i in batch.split(", ")] for batch in re.findall(r"\[([\d, ]+)\]", line)]


def test_workers_keep_the_batches_only_where_the_map_dataset_makes_them():
    text = WORKERS_OUT["order"]
    found = re.findall(
        r"^(\w+), 2 workers: the batches of 0 workers: (\w+)\n"
        r"  0 workers: (.*)\n  2 workers: (.*)$",
        text,
        flags=re.M,
    )
    assert [(name, same) for name, same, *_ in found] == [
        ("batched_first", "True"),
        ("batched_last", "False"),
        ("data_loader", "False"),
    ]
    alone = [batches_of(line) for _, _, line, _ in found]
    workers = [batches_of(line) for *_, line in found]
    assert alone[0] == alone[1] == alone[2] == workers[0]  # the same shuffle, 3 batches of 4
    # DataLoader batches in each worker, as batching after to_iter_dataset does: each
    # worker's batch holds every second example of the order, the same examples as before.
    assert workers[1] == workers[2]
    order = [i for batch in alone[0] for i in batch]
    assert workers[1][0] == order[0:8:2] and workers[1][1] == order[1:8:2]
    page = DATA_PAGE.replace("\n", " ")
    assert "the same 48 shuffled examples in batches of 4" in page
    assert "`grain.DataLoader` runs its operations, `Batch` included, in each worker" in page


def test_a_saved_position_holds_only_for_the_worker_count_that_wrote_it():
    text = WORKERS_OUT["position"]
    assert "a position saved with 2 workers holds 2 worker positions" in text
    assert "restored with 2 workers: the next batch is the expected one: True" in text
    assert "restored with 3 workers: the next batch is the expected one: False" in text
    assert "restored with 0 workers: KeyError: 'next_index'" in text
    # Threads are not workers: their position restores with no thread at all.
    assert "a position saved with 16 threads: {'next_index': 3}" in text
    assert "restored with none: the next batch is the expected one: True" in text
    page = DATA_PAGE.replace("\n", " ")
    assert "With 3 it raises nothing and reads another batch" in page
    assert "Grain 0.2.18 raises a `KeyError`" in page


def test_epochs_need_repeat_after_shuffle_and_one_iterator():
    text = WORKERS_OUT["epochs"]
    loop, repeated, mixed = re.split(r"^(?=shuffle, then|\.repeat\(3\), then)", text, flags=re.M)
    loop_orders = batches_of(loop)
    assert len(loop_orders) == 3 and loop_orders[0] == loop_orders[1] == loop_orders[2]
    epochs = batches_of(repeated)
    assert epochs[0] == loop_orders[0]  # epoch 0 is the same; the next ones are new orders
    assert all(sorted(e) == list(range(8)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3
    first = batches_of(mixed)[0]
    assert len(first) == 8 and len(set(first)) < 8  # an example twice before another once
    assert f"{len(set(first))} different" in mixed


def test_data_loader_shards_by_process_before_shuffling():
    text = WORKERS_OUT["shards"]
    rows = re.findall(
        r"epoch (\d): DataLoader with ShardByJaxProcess (\d+)-(\d+) \((\d+)\), "
        r"shuffle then slice (\d+)-(\d+) \((\d+)\)",
        text,
    )
    assert len(rows) == 2
    for _, low, high, count, s_low, s_high, s_count in rows:
        assert (int(low), int(high), int(count)) == (0, 47, 48)  # a consecutive half
        assert int(s_count) == 48 and int(s_high) - int(s_low) > 48  # from the whole range
    assert "DataLoader: the same 48 examples in both epochs: True" in text
    assert "shuffle then slice: the same examples in both epochs: False" in text
    assert "Process 0 of 2 reads examples 0 to 47 in every epoch" in DATA_PAGE.replace("\n", " ")


WORKERS = textwrap.dedent(
    """
    import sys

    import grain
    import numpy as np

    features = np.arange(64, dtype=np.float32)


    def load_example(index):
        return {"index": index, "features": features[index]}


    def batches(workers):
        dataset = grain.MapDataset.range(64).shuffle(seed=0).repeat()[0::2]
        dataset = dataset.map(load_example).batch(8).to_iter_dataset(grain.ReadOptions(num_threads=0))
        if workers:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        return iter(dataset)


    if __name__ == "__main__":  # each worker process imports this file again
        iterator = batches(1)
        try:
            next(iterator)
        except Exception as error:
            print("mp_prefetch without flags:", type(error).__name__)
        iterator.close()
        loader = grain.DataLoader(
            data_source=features,
            sampler=grain.samplers.IndexSampler(64, shuffle=True, seed=0, num_epochs=1),
            worker_count=1,
        )
        try:
            next(iter(loader))
        except Exception as error:
            print("DataLoader without flags:", type(error).__name__)
        from absl import flags

        flags.FLAGS.mark_as_parsed()
        iterator = batches(1)
        next(iterator)
        print("with the flags, its position:", sorted(iterator.get_state()))
        iterator.close()
        del iterator  # now, not at interpreter exit, when Grain's __del__ fails
    """
)


def test_grain_workers_need_parsed_flags(tmp_path):
    """What workers.py does once the flags are parsed, these fail without (workers.out
    shows the batches and positions with 2 workers)."""
    script = tmp_path / "workers.py"
    script.write_text(WORKERS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **RUN_ENVIRONMENT},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr  # every iterator closed
    assert "mp_prefetch without flags: UnparsedFlagAccessError" in result.stdout
    assert "DataLoader without flags: UnparsedFlagAccessError" in result.stdout
    assert "iterators_in_use_states" in result.stdout  # each worker's position


def test_a_crash_in_a_step_that_is_not_saved_is_refused(tmp_path):
    """Otherwise process 1 would wait for a save that never comes, and never crash."""
    result = subprocess.run(
        [sys.executable, "-m", "jaxpar.launch", "--nproc", "1", "--devices-per-process", "8",
         str(SNIPPETS / "train.py"), "--workdir", str(tmp_path), "--crash-in-save", "5"],
        capture_output=True, text=True, timeout=120, env={**os.environ, **RUN_ENVIRONMENT},
    )  # fmt: skip
    assert result.returncode != 0
    message = (
        "--crash-in-save 5: no checkpoint is saved at that step; checkpoints are saved every 4"
    )
    assert message in result.stdout + result.stderr, result.stdout + result.stderr


def test_the_resuming_page_states_the_tolerance_its_logs_are_checked_with():
    """The losses are logged to float32's last digit, which the CPU's vector width moves
    (python -m sitetools.cpus --variant avx2 shows it): the page says by how much, and the
    check accepts exactly what the snippet declares."""
    declared = tolerances(SNIPPETS / "crash_and_resume.py")
    assert declared == {"crash": 1e-5, "resume": 1e-5, "compare": 1e-5}
    page = (REPO / "docs/en/checkpoints/resuming.md").read_text(encoding="utf-8")
    assert "a difference of up to 1e-5 in these three logs" in page
    recorded = losses(RESUME["crash"])[10]
    assert f"(1.7237179 for {recorded})" in page
    assert 0 < abs(1.7237179 - float(recorded)) <= declared["crash"]


# Preemption: SIGTERM to the launcher, as SLURM or Kubernetes sends it before ending a job.
# The launcher passes it on, JAX agrees on a step, every process saves it, and train.py exits
# within the grace period; started again, the run ends as one that was never interrupted.
PREEMPTED_STEPS = 30  # not a multiple of 4: force= saves the last step


@pytest.fixture(scope="module")
def uninterrupted_30(once_per_run) -> str:
    def make(folder: Path) -> str:
        status, output, logged = train(folder / "run", PREEMPTED_STEPS)
        assert status == 0, output
        return logged

    return once_per_run("uninterrupted_30", make)[1]


def preempt(workdir: Path, in_save: bool) -> tuple[int, bool]:
    """Start train.py for many steps and send SIGTERM to the launcher while a checkpoint is
    being written (in_save) or between checkpoints; the step saved on the notice, and
    whether a save was still being written when the signal went."""
    checkpoints = workdir / "checkpoints"
    launcher = subprocess.Popen(
        [*TRAIN_PY, "--workdir", str(workdir), "--steps", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **RUN_ENVIRONMENT},
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        writing = list(checkpoints.glob("*.orbax-checkpoint-tmp")) if checkpoints.exists() else []
        finished = (checkpoints / "4" / "sha256.json").exists()
        if writing if in_save else finished and not writing:
            break
        time.sleep(0.001)
    launcher.send_signal(signal.SIGTERM)
    noticed = time.monotonic()
    mid_save = any(path.exists() for path in writing)
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == EXIT_TERMINATED, output
    assert time.monotonic() - noticed < TERM_GRACE_SECONDS, output
    log = (workdir / "log.txt").read_text()
    saved = re.findall(r"preemption notice: checkpoint (\d+) saved; exiting", log)
    assert len(saved) == 1, output
    assert (checkpoints / saved[0] / "sha256.json").exists()
    return int(saved[0]), mid_save


@pytest.mark.parametrize("in_save", [True, False], ids=["in a save", "between saves"])
def test_a_run_preempted_by_sigterm_resumes_bit_for_bit(uninterrupted_30, tmp_path, in_save):
    workdir = tmp_path / "run"
    step, mid_save = preempt(workdir, in_save)
    assert mid_save == in_save, "the SIGTERM did not land where this test meant it to"
    assert step < PREEMPTED_STEPS, f"the notice was saved at step {step}: too late to compare"
    preempted = (workdir / "log.txt").read_text()
    status, output, resumed = train(workdir, PREEMPTED_STEPS)
    assert status == 0 and f"resuming after step {step}\n" in resumed, output
    # Every step's loss (all digits of the float32) and the final state, bit for bit.
    assert {**losses(preempted), **losses(resumed)} == losses(uninterrupted_30)
    assert sorted(losses(uninterrupted_30)) == list(range(1, PREEMPTED_STEPS + 1))
    assert final_state(resumed) == final_state(uninterrupted_30)
    assert "checkpoints kept: [28, 30]" in resumed  # the 30th by force=, as in uninterrupted_30
    assert "checkpoints kept: [28, 30]" in uninterrupted_30


def test_the_preemption_page_describes_what_the_tests_do():
    page = (REPO / "docs/en/cluster/preemption.md").read_text(encoding="utf-8")
    assert f"started again for {PREEMPTED_STEPS} steps" in page
    assert (
        "keeps checkpoints 28 and\n30, as the uninterrupted one does" in page
        and "`4.orbax-checkpoint-tmp`" in page
    )
    assert f"status {EXIT_TERMINATED}" in page
    assert (
        f"`--term-grace` seconds ({parse_args(['--nproc', '2', 'x.py']).term_grace:g} by default)"
        in page
    )
    train_py = (SNIPPETS / "train.py").read_text(encoding="utf-8")
    assert "force=step == args.steps" in train_py and "force=step == args.steps" in page
    assert "manager.reached_preemption(step)" in train_py
