"""Tutorial snippets: find them, split them into named cells, run them, record their output.

A snippet is a standalone script under ``snippets/<chapter>/``. ``# %% <name>`` lines split
it into named cells (the part before the first one is the cell ``preamble``). Running a
snippet executes its cells in order in one ``__main__`` namespace, exactly as
``python snippet.py`` would, and writes each cell's standard output between MkDocs
section markers, so that a page can include the output of one cell
(``--8<-- "snippets/chapter/name.out:cell"``) and a notebook can show it under that cell.

A snippet with a ``# jaxpar.launch: --nproc 2 --devices-per-process 4`` line runs in
several processes under ``python -m jaxpar.launch``, and process 0's output is recorded.
One that also has a ``# exits with status N: <why>`` line shows what the launcher does when
a rank fails: it must end with that status, and the launcher's whole output is recorded,
every rank's lines and the launcher's own, as a reader would see it. One that another
snippet runs as a reader would, and whose every recorded line that snippet's recording
shows again, says so in a line ``# output checked through other.py: <how>``: the tests
compare the two recordings instead of launching it a second time.

A PyTorch twin (under ``snippets/pytorch/``) has a ``# torchrun: --nproc-per-node 2`` line
and runs under ``python -m torch.distributed.run`` with those options, PyTorch coming from
the folder ``make test`` installs it into (:data:`TORCH`); as PyTorch scripts do, it
prints on rank 0 only. Importing PyTorch costs about 4 CPU-seconds a process, launcher
included, so :func:`run_torch_group` runs twins that ask for the same options one after
the other in the same processes, as ``run`` does with several snippets.

A cell whose numbers depend on the CPU's bfloat16 kernels declares how far they may move, in
a line ``# numbers within 2e-4 in cells curves, same_losses: <why>``
(``sitetools.tolerances``): its check, and ``make outputs``, accept such a difference.

Snippets size their meshes from ``jax.device_count()``, so that a reader's machine with 1,
2 or 4 GPUs runs them too; one whose lesson needs exactly 8 devices says so in a line
``# needs 8 devices: <why, and how to run it elsewhere>``. ``run_on_fewer_devices``
runs snippets on N simulated devices instead of the 8 they ask for.

Command line (``PYTHONPATH=tools``)::

    python -m sitetools.snippets run snippets/chapter/name.py   # print the marked output
    python -m sitetools.snippets record [PATH ...]              # re-record .out files
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import io
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sitetools import REPO, prestarted, recordings
from sitetools.tolerances import declared_tolerances, differences

SNIPPETS_DIR = REPO / "snippets"
PREAMBLE = "preamble"
CELL_MARKER = re.compile(r"^# %%(?P<rest>.*)$")
CELL_NAME = re.compile(r"[a-z][-_0-9a-z]*")
SECTION_MARKER = re.compile(r"^\s*# --8<-- \[(?P<kind>start|end):(?P<name>[^\]]+)\]\s*$")
RECORD_COMMAND = "make outputs"
LAUNCH_MARKER = re.compile(r"^# jaxpar\.launch: (?P<options>.+)$", re.MULTILINE)
TORCHRUN_MARKER = re.compile(r"^# torchrun: (?P<options>.+)$", re.MULTILINE)
# Where `make test` installs PyTorch for the twins (Makefile TORCH), outside sys.path.
TORCH = Path(sys.prefix) / "torch"
# Printed by `run --separated` before each snippet's output, on rank 0 only.
SEPARATOR = "# snippet: "
# The ports run_torch_group found free, one for each twin's process group after the first.
ENV_TWIN_PORTS = "SITETOOLS_TWIN_PORTS"
EXIT_STATUS_MARKER = re.compile(r"^# exits with status (?P<status>\d+): (?P<why>.+)$", re.MULTILINE)
NEEDS_DEVICES_MARKER = re.compile(r"^# needs (?P<count>\d+) devices: (?P<why>.+)$", re.MULTILINE)
CHECKED_THROUGH_MARKER = re.compile(
    r"^# output checked through (?P<other>[\w-]+\.py): (?P<how>.+)$", re.MULTILINE
)
DEVICE_COUNT_LINE = 'jax.config.update("jax_num_cpu_devices", 8)'
# Set by run_on_fewer_devices: the snippet's DEVICE_COUNT_LINE asks for N devices instead.
ENV_DEVICE_COUNT = "SITETOOLS_DEVICE_COUNT"
# Gloo, the CPU collectives library, logs each connection to standard output.
GLOO_LOG = re.compile(r"\[Gloo\]|connected peer ranks")

# What makes a recorded output the same on every machine: the CPU backend (the snippets
# simulate 8 CPU devices), a fixed terminal width for rich, no colour codes. Deprecation
# warnings are errors, so that a snippet stops working here before it does for a reader.
RUN_ENVIRONMENT = {
    "JAX_PLATFORMS": "cpu",
    "COLUMNS": "80",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "PYTHONWARNINGS": "error::DeprecationWarning",
}


class SnippetError(Exception):
    """A snippet file that breaks the conventions of snippets/README.md."""


@dataclass(frozen=True)
class Cell:
    """A named cell of a snippet: its source lines and where they start in the file."""

    name: str
    first_line: int  # 1-based line number of the cell's first source line
    source: str


def discover(root: Path = SNIPPETS_DIR) -> list[Path]:
    """Every snippet under ``root``, sorted; files starting with ``_`` are not snippets."""
    return sorted(p for p in root.rglob("*.py") if not p.name.startswith("_"))


def output_path(snippet: Path) -> Path:
    """The recorded output that lives beside a snippet."""
    return snippet.with_suffix(".out")


def parse_cells(snippet: Path) -> list[Cell]:
    """Split a snippet into its named cells, checking the names."""
    lines = snippet.read_text(encoding="utf-8").splitlines(keepends=True)
    cells: list[Cell] = []
    name, start, body = PREAMBLE, 1, []
    for number, line in enumerate(lines, start=1):
        match = CELL_MARKER.match(line.rstrip("\n"))
        if match is None:
            body.append(line)
            continue
        cells.append(Cell(name, start, "".join(body)))
        name, start, body = match["rest"].strip(), number + 1, []
        where = f"{snippet}:{number}"
        if not CELL_NAME.fullmatch(name):
            raise SnippetError(
                f"{where}: cell marker {line.strip()!r} needs a name of lower-case letters, "
                f"digits, '-' or '_' (for example '# %% train_step'), so that pages and "
                f"notebooks can refer to its output."
            )
        if name == PREAMBLE or any(cell.name == name for cell in cells):
            raise SnippetError(f"{where}: cell name {name!r} is used twice; rename one.")
    cells.append(Cell(name, start, "".join(body)))
    return cells


def section(name: str, text: str) -> str:
    """``text`` wrapped in the section markers of ``pymdownx.snippets``."""
    if text and not text.endswith("\n"):
        text += "\n"
    return f"# --8<-- [start:{name}]\n{text}# --8<-- [end:{name}]\n"


def read_sections(text: str) -> dict[str, str]:
    """The inverse of :func:`section` over a whole recorded output: cell name -> text."""
    sections: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        match = SECTION_MARKER.match(line)
        if match and match["kind"] == "start":
            current = match["name"]
            sections[current] = ""
        elif match:
            current = None
        elif current is not None:
            sections[current] += line
    return sections


def strip_section_markers(text: str) -> str:
    """Source or output without its ``--8<--`` section marker lines."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not SECTION_MARKER.match(line)
    )


def run_in_process(snippet: Path, first: bool = True) -> int:
    """Run a snippet cell by cell in this process, printing its marked output.

    Returns the exit status: 0, or 1 after printing the traceback of a failing cell
    (with the snippet's own file and line numbers) to standard error. A snippet that is
    not the ``first`` this process runs skips its device-count line: the devices exist.
    """
    os.environ.update(RUN_ENVIRONMENT)
    snippet = snippet.resolve()
    sys.argv = [str(snippet)]
    sys.path.insert(0, str(snippet.parent))
    namespace = {"__name__": "__main__", "__file__": str(snippet), "__builtins__": builtins}
    devices = os.environ.get(ENV_DEVICE_COUNT)
    device_line = DEVICE_COUNT_LINE.replace("8", devices) if devices is not None else None
    if not first:
        device_line = "pass  # the devices exist already"
    # Written in one piece at the end, so that native libraries writing to the same
    # stream (Gloo, in multi-process runs) cannot cut into a line.
    output: list[str] = []
    for cell in parse_cells(snippet):
        captured = io.StringIO()
        # Padding with newlines keeps tracebacks pointing at the real lines of the file.
        source = cell.source
        if device_line is not None:
            source = source.replace(DEVICE_COUNT_LINE, device_line)
        code = compile("\n" * (cell.first_line - 1) + source, str(snippet), "exec")
        try:
            with contextlib.redirect_stdout(captured):
                exec(code, namespace)
                _wait_for_jax_effects()
        except BaseException as error:  # noqa: BLE001 - reported, then the run fails
            sys.stdout.write("".join(output) + captured.getvalue())
            sys.stdout.flush()
            print(f"\nsnippet {snippet.name} failed in cell {cell.name!r}:", file=sys.stderr)
            traceback.print_exception(type(error), error, error.__traceback__.tb_next)
            return 1
        if captured.getvalue():
            output.append(section(cell.name, captured.getvalue()))
    sys.stdout.write("".join(output))
    sys.stdout.flush()
    return 0


def _wait_for_jax_effects() -> None:
    """Let ``jax.debug.print`` callbacks land in the cell that caused them."""
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.effects_barrier()


@dataclass(frozen=True)
class RunResult:
    """What one snippet printed, in a process of its own."""

    snippet: Path
    returncode: int
    stdout: str
    stderr: str


def launch_arguments(snippet: Path) -> list[str] | None:
    """The ``python -m jaxpar.launch`` options a multi-process snippet asks for, if any."""
    match = LAUNCH_MARKER.search(snippet.read_text(encoding="utf-8"))
    return shlex.split(match["options"]) if match else None


def torchrun_arguments(snippet: Path) -> list[str] | None:
    """The ``torchrun`` options a PyTorch twin asks for (its ``# torchrun:`` line), if any."""
    match = TORCHRUN_MARKER.search(snippet.read_text(encoding="utf-8"))
    return shlex.split(match["options"]) if match else None


def expected_status(snippet: Path) -> int:
    """The exit status a snippet must end with: 0, unless a ``# exits with status`` line says."""
    match = EXIT_STATUS_MARKER.search(snippet.read_text(encoding="utf-8"))
    return int(match["status"]) if match else 0


def needed_devices(snippet: Path) -> int | None:
    """The device count a snippet's lesson needs exactly (its ``# needs N devices:`` line)."""
    match = NEEDS_DEVICES_MARKER.search(snippet.read_text(encoding="utf-8"))
    return int(match["count"]) if match else None


def checked_through(snippet: Path) -> Path | None:
    """The snippet beside this one whose run re-checks its recorded output (its ``# output
    checked through other.py:`` line), if any: that one runs it as a reader would."""
    match = CHECKED_THROUGH_MARKER.search(snippet.read_text(encoding="utf-8"))
    return snippet.with_name(match["other"]) if match else None


def tolerances(snippet: Path) -> dict[str, float]:
    """Cell name -> how far its numbers may move (the snippet's ``# numbers within`` lines)."""
    return declared_tolerances(snippet, [cell.name for cell in parse_cells(snippet)])


# The names through which a program learns how many devices there are or places data on
# them; a snippet that uses none of them runs the same on any number of devices.
DEVICE_NAMES = frozenset(
    "devices local_devices device_count local_device_count make_mesh Mesh pmap shard_map "
    "NamedSharding PartitionSpec set_mesh device_put sharding reshard "
    "with_sharding_constraint".split()
)


# Libraries whose attributes share a name with JAX's: grain.sharding.ShardOptions names no
# device.
NOT_JAX = frozenset({"grain"})


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from: ``grain`` for ``grain.sharding.X``."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def uses_devices(snippet: Path) -> bool:
    """Whether a snippet names any of ``DEVICE_NAMES``, as a name, an attribute or an
    import: if not, its output cannot depend on how many devices there are."""
    tree = ast.parse(snippet.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names = {node.id}
        elif isinstance(node, ast.Attribute) and _root(node) not in NOT_JAX:
            names = {node.attr}
        elif isinstance(node, ast.ImportFrom):
            names = {alias.name for alias in node.names}
        else:
            continue
        if names & DEVICE_NAMES:
            return True
    return False


# A reader's machine with 1 or 4 accelerators: every snippet whose lesson does not need
# exactly 8 devices must run there too (its output differs; it must not fail).
FEWER_DEVICES = (1, 4)


def fewer_device_runs(root: Path = SNIPPETS_DIR) -> dict[int, list[Path]]:
    """Device count -> the snippets that run on it. Snippets that never name a device, mesh
    or sharding run the same anywhere and are left out; each of the others runs on one of
    the counts, in turn, so that both are exercised at half the cost."""
    adapting = [
        s
        for s in discover(root)
        if launch_arguments(s) is None
        and needed_devices(s) is None
        and checked_through(s) is None  # run by another, in the environment it needs
        and uses_devices(s)
    ]
    return {count: adapting[turn :: len(FEWER_DEVICES)] for turn, count in enumerate(FEWER_DEVICES)}


def run_on_fewer_devices(snippets: list[Path], devices: int, timeout: float = 300) -> RunResult:
    """Run snippets one after the other in one process of their own on ``devices`` simulated
    devices, as a reader's machine with fewer accelerators would: a check that each runs,
    whose output is not compared. One process for them all saves importing JAX each time,
    and as only whether they run counts, XLA compiles them without its optimisations,
    which change how fast a program runs, not whether it does (a quarter less CPU).
    ``stderr`` names every snippet that failed, with its traceback."""
    with environment(devices) as env:
        env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
        command = ["run", *map(str, snippets)]
        process = prestarted.run(command, env, REPO, timeout, SERVER_ENVIRONMENT)
    return RunResult(snippets[0], process.returncode, process.stdout, process.stderr)


@contextlib.contextmanager
def environment(devices: int | None = None) -> Iterator[dict[str, str]]:
    """The environment variables a snippet runs with, ``devices`` simulated devices if not
    8, and a temporary folder of its own (``TMPDIR``) that is removed after the run, so that
    what snippets leave in ``tempfile``'s folder does not pile up in /tmp run after run."""
    with tempfile.TemporaryDirectory(prefix="snippet-") as folder:
        env = shared_environment()
        env["TMPDIR"] = folder
        if devices is not None:
            env[ENV_DEVICE_COUNT] = str(devices)
        yield env


def shared_environment() -> dict[str, str]:
    """What :func:`environment` gives every run: all but its ``TMPDIR`` and device count."""
    env = {**os.environ, **RUN_ENVIRONMENT, "PYTHONPATH": str(REPO / "tools")}
    env.pop("FORCE_COLOR", None)
    return env


# The fork server's (sitetools.prestarted): the environment this program started with, not
# one that a test has changed for its own run when the first run starts the server.
SERVER_ENVIRONMENT = shared_environment()


def run(snippet: Path, timeout: float = 300, cwd: Path = REPO) -> RunResult:
    """Run a snippet in a process of its own, as the tests and ``make outputs`` do.

    A multi-process snippet (one with a ``# jaxpar.launch: OPTIONS`` line) runs under
    ``python -m jaxpar.launch OPTIONS``; its recorded output is that of process 0. A
    one-process snippet runs in the folder ``cwd``: one that reads what a PyTorch twin
    wrote there (its ``# output checked through`` line names the twin) runs after it, in
    the folder the twin ran in.
    """
    if torchrun_arguments(snippet) is not None:
        return run_torch_group([snippet], timeout)[0]
    with environment() as env:
        return _run(snippet, env, timeout, cwd)


def run_torch_group(
    snippets: list[Path], timeout: float = 300, cwd: Path | None = None
) -> list[RunResult]:
    """Run PyTorch twins that ask for the same ``torchrun`` options one after the other in
    one ``torchrun``, in the folder ``cwd`` (a temporary one by default), and split rank 0's
    output by snippet. A twin that
    fails gets the run's status and standard error (which names it); if the run broke
    without naming one, every twin does."""
    options = {tuple(torchrun_arguments(s) or ()) for s in snippets}
    if len(options) != 1 or () in options:
        found = {s.name: torchrun_arguments(s) for s in snippets}
        raise SnippetError(
            f"run_torch_group runs PyTorch twins with the same '# torchrun:' options in one "
            f"torchrun, but got {found}; give each a line such as "
            f"'# torchrun: --nproc-per-node 4', the same for all, or run them apart."
        )
    with environment() as env:
        env["PYTHONPATH"] = os.pathsep.join([str(TORCH), env["PYTHONPATH"]])
        # torchrun's own store on the first port, each later twin's on its own: all
        # different (left to pick its own, torchrun once took a twin's, and that twin hung).
        ports = free_ports(len(snippets))
        env[ENV_TWIN_PORTS] = ",".join(map(str, ports))
        process = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--master-addr", "127.0.0.1",
             "--master-port", str(ports[0]), *options.pop(), __file__,
             "run", "--separated", *map(str, snippets)],
            capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd or env["TMPDIR"],
        )  # fmt: skip
    outputs = dict.fromkeys(map(str, snippets), "")
    current = None
    for line in process.stdout.splitlines(keepends=True):
        if line.startswith(SEPARATOR):
            current = line[len(SEPARATOR) :].strip()
        elif current in outputs and not GLOO_LOG.search(line):
            outputs[current] += line
    failed = {s for s in snippets if f"snippet {s.name} failed" in process.stderr}
    stderr = process.stderr
    if process.returncode != 0 and not failed:  # torchrun itself, or a rank, broke
        failed = set(snippets)
        reached = [Path(name).name for name in outputs if f"{SEPARATOR}{name}\n" in process.stdout]
        stderr = f"the torchrun broke after rank 0 had started {reached}:\n{stderr}"
    results = []
    for snippet in snippets:
        status, errors = (process.returncode or 1, stderr) if snippet in failed else (0, "")
        results.append(RunResult(snippet, status, outputs[str(snippet)], errors))
    return results


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports that the OS has free on 127.0.0.1 now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for each in sockets:
            each.bind(("127.0.0.1", 0))
        return [each.getsockname()[1] for each in sockets]


def _run(snippet: Path, env: dict[str, str], timeout: float, cwd: Path = REPO) -> RunResult:
    options = launch_arguments(snippet)
    if options is None:  # one process: forked from one that has imported JAX already
        process = prestarted.run(["run", str(snippet)], env, cwd, timeout, SERVER_ENVIRONMENT)
        return RunResult(snippet, process.returncode, process.stdout, process.stderr)
    if expected_status(snippet) != 0:
        # Run from the snippet's folder, as a reader would, so that tracebacks name the file
        # as the reader does.
        process = subprocess.run(
            [sys.executable, "-m", "jaxpar.launch", *options, snippet.name],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            timeout=timeout,
            cwd=snippet.parent,
        )
        transcript = "".join(
            line for line in process.stdout.splitlines(keepends=True) if not GLOO_LOG.search(line)
        )
        return RunResult(snippet, process.returncode, transcript, "")
    process = subprocess.run(
        [sys.executable, "-m", "jaxpar.launch", *options, __file__, "run", str(snippet)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )
    stdout = output_of_process_zero(process.stdout)
    return RunResult(snippet, process.returncode, stdout, process.stderr)


def output_of_process_zero(launcher_output: str) -> str:
    """Process 0's recorded sections in the launcher's output: its lines without their
    prefix, and without what native libraries wrote around them (Gloo's log lines, or a
    line break of one that landed on its own)."""
    prefix = "[rank 0] "
    kept, inside = [], False
    for line in launcher_output.splitlines(keepends=True):
        if not line.startswith(prefix) or GLOO_LOG.search(line):
            continue
        line = line[len(prefix) :]
        if line.startswith("# --8<-- [start:"):
            inside = True
        if inside:
            kept.append(line)
        if line.startswith("# --8<-- [end:"):
            inside = False
    return "".join(kept)


def record(snippets: list[Path]) -> int:
    """Re-record the output of each snippet; returns the number that failed. The PyTorch
    twins among them run in one torchrun and one folder, and the snippets checked through
    a twin then run in that folder, reading what the twins wrote (a snippet checked through
    a twin brings its twin along). Each is noted in ``snippets/recordings.json``."""
    readers = [s for s in snippets if torchrun_arguments(checked_through(s) or s) is not None]
    readers = [s for s in readers if torchrun_arguments(s) is None]
    twins = [s for s in snippets if torchrun_arguments(s) is not None]
    twins += [checked_through(r) for r in readers if checked_through(r) not in twins]
    # One checked through another that is no twin runs alone where it can (train.py); where
    # it can run only in the environment its runner makes (startup_check.py), its recording
    # is kept if the runner, which re-checks it, succeeds.
    through = [s for s in snippets if checked_through(s) and s not in readers]
    others = [s for s in snippets if s not in twins + readers]
    others += [c for c in dict.fromkeys(checked_through(s) for s in through) if c not in others]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(run, others))
    with tempfile.TemporaryDirectory(prefix="twins-") as folder:
        results += run_torch_group(twins, cwd=Path(folder)) if twins else []
        results += [run(reader, cwd=Path(folder)) for reader in readers]
    failed: list[RunResult] = []
    written: dict[Path, bool] = {}  # snippet -> whether this run's output was written
    for result in results:
        if result.returncode != expected_status(result.snippet):
            failed.append(result)
            continue
        target = output_path(result.snippet)
        old = target.read_text(encoding="utf-8") if target.exists() else None
        if old is not None and old != result.stdout:
            if not differences(old, result.stdout, tolerances(result.snippet)):
                # Another CPU's last bf16 digit: the recording stays as it is.
                print(f"unchanged {target.relative_to(REPO)} (within its declared tolerance)")
                written[result.snippet] = False
                continue
        target.write_text(result.stdout, encoding="utf-8")
        written[result.snippet] = True
        print(f"{'unchanged' if old == result.stdout else 'recorded'} {target.relative_to(REPO)}")
    failures = 0
    for result in failed:
        if result.snippet in through and written.get(checked_through(result.snippet)) is not None:
            print(f"kept {output_path(result.snippet).relative_to(REPO)} (its runner re-checks it)")
            written[result.snippet] = False
            continue
        failures += 1
        name = result.snippet.relative_to(REPO)
        print(f"FAILED {name}\n{result.stdout}{result.stderr}", file=sys.stderr)
    recordings.note(written)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sitetools.snippets", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser(
        "run", help="run snippets one after the other in this process, printing their output"
    )
    run_parser.add_argument("snippets", type=Path, nargs="+")
    run_parser.add_argument(
        "--separated", action="store_true", help=f"print '{SEPARATOR}PATH' before each"
    )
    record_parser = commands.add_parser(
        "record", help="re-record .out files (all snippets by default)"
    )
    record_parser.add_argument("snippets", type=Path, nargs="*")
    args = parser.parse_args(argv)
    if args.command == "run":
        failed = 0
        ports = os.environ.get(ENV_TWIN_PORTS, "").split(",")
        for i, snippet in enumerate(args.snippets):
            if args.separated and os.environ.get("RANK", "0") == "0":
                print(f"{SEPARATOR}{snippet}", flush=True)
            if args.separated and i > 0 and len(ports) > i:
                # Each twin's process group gets a store of its own, on a port the OS had
                # free: in torchrun's store, a second default group finds the keys of the
                # first and waits on its closed connections; and the port after torchrun's
                # may be another test's server, which the ranks would wait on (a CI run hung).
                os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
                os.environ["MASTER_PORT"] = ports[i]
            failed += run_in_process(snippet, first=i == 0)
        if args.separated:
            # A rank of torchrun ends here, without running C++ destructors: a thread that
            # PyTorch's distributed libraries left behind aborted a rank at exit once
            # ("terminate called without an active exception"), after every twin had run.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1 if failed else 0)
        return 1 if failed else 0
    snippets = [p.resolve() for p in args.snippets] or discover()
    return 1 if record(snippets) else 0


if __name__ == "__main__":
    sys.exit(main())
