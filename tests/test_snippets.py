"""Every snippet runs, in a process of its own, and prints exactly its recorded output."""

from __future__ import annotations

import ast
import difflib
import json
import sys
from importlib import metadata
from pathlib import Path

import pytest
from sitetools import REPO
from sitetools.snippets import (
    RECORD_COMMAND,
    SNIPPETS_DIR,
    checked_through,
    discover,
    expected_status,
    fewer_device_runs,
    launch_arguments,
    output_path,
    parse_cells,
    run,
    run_on_fewer_devices,
    run_torch_group,
    tolerances,
    torchrun_arguments,
)
from sitetools.tolerances import differences

SNIPPETS = discover()


def ids(snippets: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in snippets]


IDS = ids(SNIPPETS)
# What a reader needs installed to run a snippet copied into an empty folder.
# absl comes with grain, whose worker processes need its flags marked as parsed (grain
# issue 1355): snippets/checkpoints/workers.py does so.
ALLOWED_IMPORTS = {
    *("jax", "flax", "optax", "orbax", "grain", "absl", "numpy", "rich", "sklearn"),
    "safetensors",
}
# The PyTorch twins may also import torch.
TWIN_IMPORTS = {"torch"}
DEVICE_LINES = ["import jax", 'jax.config.update("jax_num_cpu_devices", 8)']
# Multi-process snippets get their devices from `python -m jaxpar.launch` instead.
LAUNCHED_LINES = [
    "import jax",
    "from jaxpar import initialize_distributed",
    "initialize_distributed()",
]


# A snippet that another one launches as a reader would (its "# output checked through"
# line) is not launched again: its chapter's tests compare the two recordings. The PyTorch
# twins run together, in one torchrun (sitetools.snippets.run_torch_group).
TWINS = [s for s in SNIPPETS if torchrun_arguments(s) is not None]
RUN_ALONE = [s for s in SNIPPETS if checked_through(s) is None and s not in TWINS]


def test_snippets_exist():
    assert SNIPPETS, "no snippets found under snippets/"


def test_a_snippet_checked_through_another_is_run_by_it():
    for snippet in set(SNIPPETS) - set(RUN_ALONE) - set(TWINS):
        other = checked_through(snippet)
        assert other in RUN_ALONE + TWINS, (
            f"{snippet.name}: {other.name} is not a snippet that runs"
        )
        assert snippet.name in other.read_text(encoding="utf-8"), (
            f"{other.name} does not run {snippet.name}, so it cannot check its output"
        )
        assert output_path(snippet).exists(), f"{snippet.name} has no recording"


@pytest.mark.parametrize("snippet", RUN_ALONE, ids=ids(RUN_ALONE))
def test_snippet_output_matches_recording(snippet: Path):
    assert_matches_recording(snippet, run(snippet))


# Importing PyTorch costs about 4 CPU-seconds a process: one torchrun runs every twin. A JAX
# snippet checked through a twin then runs in the same folder, reading what the twins wrote.
def test_pytorch_twins_match_recordings(tmp_path):
    assert {tuple(torchrun_arguments(s)) for s in TWINS} == {("--nproc-per-node", "4")}, (
        "the twins run in one torchrun: give them all '# torchrun: --nproc-per-node 4'"
    )
    for snippet, result in zip(TWINS, run_torch_group(TWINS, cwd=tmp_path), strict=True):
        assert_matches_recording(snippet, result)
    for snippet in SNIPPETS:
        if checked_through(snippet) in TWINS:
            assert_matches_recording(snippet, run(snippet, cwd=tmp_path))


def assert_matches_recording(snippet: Path, result) -> None:
    name = snippet.relative_to(REPO)
    status = expected_status(snippet)
    assert result.returncode == status, (
        f"{name} ended with status {result.returncode}, not {status}:\n{result.stdout}{result.stderr}"
    )
    # XLA's partitioner replicates an array it cannot re-lay out with a collective, and
    # says so on stderr: a reader who copies the snippet would see it, and pay for it.
    assert "Involuntary full rematerialization" not in result.stderr, (
        f"{name}: XLA replicated an array to change its sharding (below); give the "
        f"partitioner a layout it can reach:\n{result.stderr}"
    )
    recorded = output_path(snippet)
    rerecord = f"re-record with: {RECORD_COMMAND} SNIPPETS={name}"
    assert recorded.exists(), f"{recorded.relative_to(REPO)} is missing; {rerecord}"
    expected = recorded.read_text(encoding="utf-8")
    problems = differences(expected, result.stdout, tolerances(snippet))
    if problems:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                result.stdout.splitlines(keepends=True),
                fromfile=f"{recorded.relative_to(REPO)} (recorded)",
                tofile=f"{name} (this run)",
            )
        )
        pytest.fail(
            f"the output of {name} changed ({'; '.join(problems)}):\n{diff}\n"
            f"If the change is intended, {rerecord}"
        )


@pytest.mark.parametrize("snippet", SNIPPETS, ids=IDS)
def test_snippet_follows_conventions(snippet: Path):
    source = snippet.read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert ast.get_docstring(tree), f"{snippet.name} needs a module docstring saying what it shows"
    launched = launch_arguments(snippet) is not None
    imports_jax = any(
        isinstance(node, ast.Import) and any(a.name == "jax" for a in node.names)
        for node in tree.body
    )
    # A PyTorch twin, or a module the twins share that imports no JAX at the top, has no devices to create.
    expected = LAUNCHED_LINES if launched else DEVICE_LINES if imports_jax else []
    statements = [ast.get_source_segment(source, node) for node in tree.body[1 : 1 + len(expected)]]
    assert statements == expected, (
        f"{snippet.name}: the first statements after the docstring must be {expected}, "
        f"so that the devices exist before anything touches one"
    )
    # jaxpar appears only in snippets about jaxpar itself (its title says so) or run by its launcher.
    teaches_jaxpar = launched or "jaxpar" in ast.get_docstring(tree).splitlines()[0]
    allowed = ALLOWED_IMPORTS | ({"jaxpar"} if teaches_jaxpar else set())
    if snippet.parent.name == "pytorch":
        allowed |= TWIN_IMPORTS
    # Any snippet may import the modules beside it (same_start.py, gpt.py, counting.py),
    # which a reader keeps in the same folder.
    allowed |= {p.stem for p in snippet.parent.glob("*.py")}
    parse_cells(snippet)  # raises on unnamed or duplicate cells
    tolerances(snippet)  # raises on a tolerance line that names no cell or no number
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        for module in names:
            top = module.split(".")[0]
            assert top in allowed or top in sys.stdlib_module_names, (
                f"{snippet.name} imports {module}; snippets may import only "
                f"{sorted(allowed)} and the standard library"
            )


# A reader's machine with 1 or 4 accelerators (sitetools.snippets.fewer_device_runs): each
# snippet on one of the counts, so that an edit runs again only its own.
FEWER_DEVICE_RUNS = [
    pytest.param(snippet, devices, id=f"{snippet.relative_to(SNIPPETS_DIR)}-{devices}")
    for devices, snippets in fewer_device_runs().items()
    for snippet in snippets
]


@pytest.mark.parametrize("snippet, devices", FEWER_DEVICE_RUNS)
def test_snippets_run_on_fewer_devices(snippet: Path, devices: int):
    result = run_on_fewer_devices([snippet], devices)
    assert result.returncode == 0, (
        f"on {devices} devices, as on a reader's machine with {devices} accelerators, "
        f"a snippet fails (below). Size its meshes from jax.device_count(), or, if the "
        f"lesson needs exactly 8 devices, say so in a line "
        f"'# needs 8 devices: <why, and how to run it elsewhere>':\n{result.stderr}"
    )


def test_every_recording_has_its_snippet():
    orphans = [p for p in (REPO / "snippets").rglob("*.out") if not p.with_suffix(".py").exists()]
    assert not orphans, f"recorded outputs without a snippet: {orphans}"


def test_every_recording_names_the_script_jax_and_cpu_it_was_made_with():
    """snippets/recordings.json holds, for each recorded output, the script as it was run
    (its hash), the JAX version and the CPU: a script edited since its recording is named,
    with the command that records it again."""
    from sitetools import recordings

    recorded = recordings.load()
    snippets = [s for s in discover() if output_path(s).exists()]
    stale = [s.relative_to(REPO).as_posix() for s in snippets if recordings.stale(s, recorded)]
    assert not stale, (
        f"{', '.join(stale)} changed after its output was recorded (or was never recorded): "
        f'run make outputs SNIPPETS="{" ".join(stale)}"'
    )
    names = {s.relative_to(REPO).as_posix() for s in snippets}
    assert set(recorded) == names, f"recordings of no snippet: {sorted(set(recorded) - names)}"
    assert all(entry["jax"] and entry["cpu"] for entry in recorded.values())


def test_a_script_edited_after_its_recording_is_stale(tmp_path, monkeypatch):
    from sitetools import recordings

    snippet = REPO / "snippets" / "data_parallel" / "linear_regression.py"
    monkeypatch.setattr(recordings, "RECORDINGS_FILE", tmp_path / "recordings.json")
    assert recordings.stale(snippet)  # never recorded
    recordings.note({snippet: True})
    assert not recordings.stale(snippet)
    entry = recordings.load()["snippets/data_parallel/linear_regression.py"]
    assert entry["cpu"] == recordings.cpu_kind() and entry["jax"] == metadata.version("jax")
    assert recordings.stale(
        snippet, {snippet.relative_to(REPO).as_posix(): entry | {"source": "0"}}
    )
    recordings.note({snippet: False})  # a recording kept within tolerance keeps its machine
    assert recordings.load()["snippets/data_parallel/linear_regression.py"] == entry
    gone = {"snippets/basics/deleted.py": entry}  # a snippet deleted since its recording
    recordings.RECORDINGS_FILE.write_text(json.dumps(recordings.load() | gone), "utf-8")
    recordings.note({})
    assert set(recordings.load()) == {"snippets/data_parallel/linear_regression.py"}
