"""The snippet machinery itself: cells, sections, failures and diffs."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
from sitetools.snippets import (
    SnippetError,
    checked_through,
    output_of_process_zero,
    parse_cells,
    read_sections,
    run,
    run_on_fewer_devices,
    run_torch_group,
    section,
    uses_devices,
)

# A fresh interpreter's: "fork" on Linux before Python 3.14, "forkserver" from 3.14.
DEFAULT_START_METHOD = multiprocessing.get_context().get_start_method()


def write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "example.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import jax\nprint(jax.numpy.ones(3))  # a jax.devices() comment\n", False),
        ('"""On 8 devices."""\nimport jax\nprint(jax.device_count())\n', True),
        ("from jax.sharding import NamedSharding\n", True),
        ("import jax\nmesh = jax.make_mesh((2,), ('x',))\n", True),
        ("import grain\nshards = grain.sharding.ShardOptions(0, 2)\n", False),
        ("import jax\nprint(jax.numpy.ones(3).sharding)\n", True),
    ],
)
def test_a_snippet_uses_devices_when_its_code_names_them(tmp_path, source, expected):
    """Names in comments and strings do not count; names in code and imports do."""
    assert uses_devices(write(tmp_path, source)) is expected


def test_a_snippet_names_the_snippet_beside_it_that_checks_its_output(tmp_path):
    plain = write(tmp_path, '"""Doc."""\n# jaxpar.launch: --nproc 2\nprint(1)\n')
    assert checked_through(plain) is None
    marked = write(tmp_path, '"""Doc."""\n# output checked through other.py: it runs me\n')
    assert checked_through(marked) == tmp_path / "other.py"


def test_cells_are_named_and_keep_their_line_numbers(tmp_path):
    path = write(tmp_path, '"""Doc."""\nx = 1\n# %% first\ny = 2\n# %% second\nz = 3\n')
    cells = parse_cells(path)
    assert [(c.name, c.first_line) for c in cells] == [("preamble", 1), ("first", 4), ("second", 6)]


@pytest.mark.parametrize("marker", ["# %%", "# %% Has Capitals", "# %% two words"])
def test_unnamed_cell_is_refused(tmp_path, marker):
    path = write(tmp_path, f"x = 1\n{marker}\ny = 2\n")
    with pytest.raises(SnippetError, match=r"example.py:2: cell marker .* needs a name"):
        parse_cells(path)


def test_duplicate_cell_is_refused(tmp_path):
    path = write(tmp_path, "# %% a\nx = 1\n# %% a\n")
    with pytest.raises(SnippetError, match="cell name 'a' is used twice"):
        parse_cells(path)


def test_sections_round_trip():
    text = section("a", "one\ntwo") + section("b", "three\n")
    assert read_sections(text) == {"a": "one\ntwo\n", "b": "three\n"}


def test_run_records_each_cells_output(tmp_path):
    path = write(tmp_path, 'print("start")\n# %% quiet\nx = 1\n# %% loud\nprint(x + 1)\n')
    result = run(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == section("preamble", "start\n") + section("loud", "2\n")


def test_what_a_snippet_leaves_in_the_temporary_folder_is_removed(tmp_path):
    source = "import tempfile\nfolder = tempfile.mkdtemp()\nprint(folder)\n"
    result = run(write(tmp_path, source))
    assert result.returncode == 0, result.stderr
    left = Path(result.stdout.splitlines()[1])  # after the section's start marker
    assert left.name and not left.exists() and not left.parent.exists()


# A snippet that reports where it ran, and ends with a thread still running and an atexit
# function: a fresh interpreter waits for the thread, then calls the function.
ENDING = """
import atexit, os, sys, threading, time
print("JAX imported before the snippet:", "jax" in sys.modules, "parent:", os.getppid())
atexit.register(lambda: os.write(2, b"atexit ran\\n"))
threading.Thread(target=lambda: (time.sleep(0.2), os.write(2, b"thread ended\\n"))).start()
"""


def test_a_run_forks_from_the_prestarted_server_and_ends_as_python_does(tmp_path):
    result = run(write(tmp_path, ENDING))
    assert result.returncode == 0, result.stderr
    assert "JAX imported before the snippet: True" in result.stdout
    assert f"parent: {os.getpid()}\n" not in result.stdout  # the fork server's child
    assert result.stderr == "thread ended\natexit ran\n"


def test_a_run_with_its_own_environment_gets_a_fresh_process(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_ENABLE_X64", "1")  # JAX reads it at import: no prestarted JAX
    result = run(write(tmp_path, ENDING))
    assert result.returncode == 0, result.stderr
    assert "JAX imported before the snippet: False" in result.stdout
    assert f"parent: {os.getpid()}\n" in result.stdout


def test_a_fork_server_that_died_is_started_again_with_the_snippets_environment(tmp_path):
    from multiprocessing import forkserver

    source = "import os, sys\nprint(sys.warnoptions, os.environ['JAX_PLATFORMS'], os.getppid())\n"
    path = write(tmp_path, source)
    first = run(path)
    os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)
    again = run(path)
    assert again.returncode == 0, again.stderr
    assert "['error::DeprecationWarning'] cpu" in again.stdout
    assert again.stdout != first.stdout  # another fork server: another parent
    assert f" {os.getpid()}\n" not in again.stdout


def test_a_snippet_starts_processes_as_it_would_in_a_fresh_interpreter(tmp_path):
    source = """
    import multiprocessing
    def work(queue):
        queue.put("from the child")
    queue = multiprocessing.Queue()
    process = multiprocessing.Process(target=work, args=(queue,))
    process.start()
    print(queue.get(), multiprocessing.get_start_method())
    process.join()
    """
    result = run(write(tmp_path, source))
    assert result.returncode == 0, result.stderr
    assert result.stdout == section("preamble", f"from the child {DEFAULT_START_METHOD}\n")


def test_fewer_devices_runs_compile_without_optimisations_on_their_device_count(tmp_path):
    source = 'import jax\njax.config.update("jax_num_cpu_devices", 8)\n'
    source += "print(jax.device_count(), jax.config.read('jax_disable_most_optimizations'))\n"
    result = run_on_fewer_devices([write(tmp_path, source)], 4)
    assert result.returncode == 0, result.stderr
    assert result.stdout == section("preamble", "4 True\n")
    assert run(write(tmp_path, source)).stdout == section("preamble", "8 False\n")


def test_a_jax_option_jax_cannot_read_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "maybe")
    result = run(write(tmp_path, "print('never')\n"))
    assert result.returncode == 1
    assert "JAX_DISABLE_MOST_OPTIMIZATIONS='maybe': not a value JAX reads" in result.stderr
    assert "never" not in result.stdout


def test_a_run_past_its_timeout_is_stopped(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run(write(tmp_path, "import time\ntime.sleep(60)\n"), timeout=1)


def test_failing_snippet_reports_its_traceback_with_real_lines(tmp_path):
    path = write(tmp_path, 'print("ok")\n# %% boom\nx = 1\nraise ValueError("broken on purpose")\n')
    result = run(path)
    assert result.returncode == 1
    assert "failed in cell 'boom'" in result.stderr
    assert f'File "{path}", line 4' in result.stderr
    assert "ValueError: broken on purpose" in result.stderr
    assert result.stdout == section("preamble", "ok\n")


def test_process_zero_keeps_its_sections_and_drops_what_gloo_wrote_around_them():
    launcher_output = (
        "[rank 1] # --8<-- [start:a]\n[rank 1] from rank 1\n[rank 1] # --8<-- [end:a]\n"
        "[rank 0] [Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected"
        " peer ranks is : 1\n[rank 0] \n"  # Gloo's line break, written on its own
        "[rank 0] # --8<-- [start:a]\n[rank 0] one\n[rank 0] \n[rank 0] two\n"
        "[rank 0] [Gloo] Rank 0 is connected to 1 peer ranks\n[rank 0] # --8<-- [end:a]\n"
        "[launch] all ranks finished\n"
    )
    assert output_of_process_zero(launcher_output) == section("a", "one\n\ntwo\n")


def test_twins_that_ask_for_different_torchrun_options_are_refused_by_name(tmp_path):
    two = tmp_path / "two.py"
    two.write_text("# torchrun: --nproc-per-node 2\n", encoding="utf-8")
    four = tmp_path / "four.py"
    four.write_text("# torchrun: --nproc-per-node 4\n", encoding="utf-8")
    plain = tmp_path / "plain.py"
    plain.write_text("print(1)\n", encoding="utf-8")
    for snippets in ([two, four], [plain]):
        with pytest.raises(SnippetError, match="same '# torchrun:' options") as error:
            run_torch_group(snippets)
        assert snippets[-1].name in str(error.value)
