"""The multi-process chapter's claims: 2 processes x 4 devices train exactly as 8 devices in
one, and what reading a global array does when no process holds all of it."""

from __future__ import annotations

import inspect
import re

import jax
from sitetools import REPO
from sitetools.snippets import read_sections

from jaxpar.launch import parse_args

TWO = "multi_process/mlp_two_processes.out"
RECORDED = read_sections((REPO / "snippets" / TWO).read_text(encoding="utf-8"))


def printed(path: str, label: str) -> str:
    text = (REPO / "snippets" / path).read_text(encoding="utf-8")
    return re.search(rf"{label} ([\d.]+)", text)[1]


def test_two_processes_reach_the_parameters_of_one_process_with_eight_devices():
    one = "data_parallel/mlp_data_parallel.out"
    assert printed(TWO, "parameter fingerprint") == printed(one, "parameter fingerprint")
    assert printed(TWO, "test accuracy") == printed(
        one, "jit \\+ NamedSharding: loss [\\d.]+, test accuracy"
    )
    assert printed(TWO, "loss after 40 steps:") == printed(one, "jit \\+ NamedSharding: loss")


def test_reading_a_global_array():
    lines = RECORDED["indexing"]
    # pmap outputs are per-process: out[0] is process 0's first device, and process 1's.
    assert "pmap output fully addressable: True" in lines
    assert "out[0] in each process: [ 0. 40.]" in lines
    # Auto axes: x[0] works, replicated, through a collective.
    assert "Auto axes, x[0]: (64,) replicated: True" in lines
    assert "its compiled collectives (XLA:CPU): ['all-reduce']" in lines
    # Explicit axes: x[0] raises.
    assert "Explicit axes, x[0]:\n  ShardingTypeError: Use `.at[...].get(out_sharding=)`" in lines
    # What the error suggests fails in jax.jit; auto_axes (collective) and a shard (local) work.
    assert (
        "x.at[0].get(out_sharding=P()) in jax.jit:\n  ShardingTypeError: slicing on sharded dims"
        in lines
    )
    assert "auto_axes(lambda a: a[0], out_sharding=P())(x): float32[64]" in lines
    assert "x.addressable_shards[0].data[0]: float32[64]" in lines
    # Fetching a non-replicated global array to the host is what needs every process.
    assert "np.asarray(x):\n  RuntimeError: Fetching value for `jax.Array` that spans" in lines
    assert "non-addressable (non process\n    local) devices is not possible" in lines
    assert "process_allgather(x, tiled=True): (256, 64)" in lines


def test_initialisation_waits_300_s_by_default_and_60_s_under_the_launcher():
    """multi-process.md, "A rank that never connects"."""
    timeout = inspect.signature(jax.distributed.initialize).parameters["initialization_timeout"]
    assert timeout.default == 300
    assert parse_args(["--nproc", "2", "train.py"]).init_timeout == 60
