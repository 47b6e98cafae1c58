"""The data-parallelism chapter's claims, read from its recorded outputs, and the HLO check."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from sitetools import REPO
from sitetools.snippets import read_sections

RECORDED = read_sections(
    (REPO / "snippets/data_parallel/mlp_data_parallel.out").read_text(encoding="utf-8")
)


def test_four_ways_reach_the_same_parameters():
    lines = RECORDED["compare"].splitlines()
    assert [line.split()[0] for line in lines] == ["pmap", "jit", "shard_map"]
    assert all(line.endswith("max relative difference < 1e-5: True") for line in lines)


def test_naive_shard_map_gradients_are_8x():
    ratios = re.findall(r"naive gradient is ([\d.]+)x", RECORDED["naive"])
    assert ratios and all(float(r) == 8.0 for r in ratios)


def test_recorded_jit_step_holds_an_all_reduce():
    count = int(re.search(r"all-reduce ops in the compiled step: (\d+)", RECORDED["hlo"])[1])
    assert count >= 1


def test_compiled_data_parallel_step_all_reduces_the_gradient():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    w = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P()))
    x = jax.device_put(jnp.ones((64, 4)), NamedSharding(mesh, P("data")))

    def loss(w, x):
        return jnp.mean((x @ w) ** 2)

    hlo = jax.jit(jax.grad(loss)).lower(w, x).compile().as_text()
    assert " all-reduce(" in hlo
