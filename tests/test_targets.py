"""Tests of jaxpar.targets: compiling for GPUs and TPUs this machine does not have."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxpar import TARGETS, CompilerNotInstalledError, compile_for, summarise, target_devices
from jaxpar import targets as module


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def sds(mesh, shape, spec, dtype=jnp.bfloat16):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=jax.NamedSharding(mesh, spec))


def loss(w, x):
    return jnp.mean(jnp.square(x @ w).astype(jnp.float32))


@pytest.mark.parametrize("name", [name for name in TARGETS if name != "cpu"])
def test_every_target_has_its_devices_and_compiles_a_sharded_gradient(name, mesh):
    target, devices = TARGETS[name], target_devices(name)
    assert len(devices) == target.devices
    assert len({d.process_index for d in devices}) == target.hosts
    size = min(8, target.devices)
    small = jax.make_mesh((2, size // 2), ("data", "model"), devices=jax.devices()[:size])
    w, x = sds(small, (256, 256), jax.P(None, "model")), sds(small, (64, 256), jax.P("data"))
    summary = summarise(compile_for(name, jax.grad(loss), w, x))
    assert summary.collectives and all(
        c.element_types == ("bf16",) for c in summary.collectives[:1]
    )
    assert summary.argument_bytes == (256 * 256 // (size // 2) + 64 // 2 * 256) * 2


def test_arguments_keep_their_specs_and_axis_types_on_the_target(mesh):
    explicit = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = sds(explicit, (64, 128), jax.P("data"))
    compiled = compile_for("h100-8", lambda x: jnp.sum(x, axis=0), x)
    (sharding,) = jax.tree.leaves(compiled.input_shardings)
    assert sharding.spec == jax.P("data")
    assert sharding.mesh.axis_types == (jax.sharding.AxisType.Explicit,)
    assert sharding.mesh.devices.flat[0].device_kind == "NVIDIA H100 80GB HBM3"


def test_a_larger_abstract_mesh_compiles_for_two_hosts():
    hosts = jax.sharding.AbstractMesh((2, 8), ("hosts", "gpus"))
    x = sds(hosts, (64, 128), jax.P(("hosts", "gpus")), jnp.float32)
    summary = summarise(compile_for("h100-16", lambda x: jnp.sum(x, axis=0), x))
    (collective,) = summary.collectives
    assert (collective.group_size, collective.axes) == (16, ("hosts", "gpus"))


def test_hosts_are_the_outer_axis_of_a_two_host_mesh():
    target_mesh = module._mesh_on(
        jax.sharding.AbstractMesh((2, 8), ("hosts", "gpus")), target_devices("h100-16")
    )
    assert [[d.process_index for d in row] for row in target_mesh.devices] == [[0] * 8, [1] * 8]


def test_cpu_compiles_as_usual(mesh):
    w, x = sds(mesh, (256, 256), jax.P()), sds(mesh, (64, 256), jax.P("data"))
    (collective,) = summarise(compile_for("cpu", jax.grad(loss), w, x)).collectives
    assert collective.element_types == ("f32",)  # XLA:CPU widens bfloat16 collectives


def test_unknown_target_names_the_known_ones(mesh):
    with pytest.raises(
        ValueError, match=r"Unknown target 'h100'; compile_for knows 'cpu', 'h100-8'"
    ):
        compile_for("h100", loss, sds(mesh, (8, 8), jax.P()), sds(mesh, (8, 8), jax.P()))


def test_a_mesh_larger_than_the_target_names_larger_targets():
    hosts = jax.sharding.AbstractMesh((2, 8), ("hosts", "gpus"))
    with pytest.raises(
        ValueError, match=r"has 16 devices, more than v5e-8's 8 .*\(h100-16, v5e-16, v5e-8x2\)"
    ):
        compile_for("v5e-8", jnp.sum, sds(hosts, (16,), jax.P(("hosts", "gpus"))))


def test_arguments_without_a_mesh_are_refused_with_the_fix():
    with pytest.raises(
        ValueError, match=r"found none\. Give the arguments NamedShardings on one mesh"
    ):
        compile_for("h100-8", jnp.sum, jax.ShapeDtypeStruct((8,), jnp.float32))


def test_arguments_on_two_meshes_are_refused(mesh):
    other = jax.make_mesh((8,), ("data",))
    with pytest.raises(ValueError, match=r"found \{'data': 2, 'model': 4\} and \{'data': 8\}"):
        compile_for("h100-8", lambda a, b: a, sds(mesh, (8,), jax.P()), sds(other, (8,), jax.P()))


def test_not_a_function_is_refused(mesh):
    with pytest.raises(TypeError, match=r"needs the function to compile, got int"):
        compile_for("h100-8", 3, sds(mesh, (8,), jax.P()))


def test_a_missing_compiler_names_what_to_install(monkeypatch):
    monkeypatch.setattr(module, "_find", lambda relative, package: None)
    with pytest.raises(
        CompilerNotInstalledError, match=r"needs jax-cuda13-pjrt==0\.12\.0\.1.*run `make`"
    ):
        module._cuda_plugin.__wrapped__()


def test_an_unknown_gpu_description_lists_those_installed():
    with pytest.raises(
        CompilerNotInstalledError, match=r"no description of 'H800'; it has .*NVIDIA H100 80GB HBM3"
    ):
        module._gpu_spec("H800")


def test_a_shard_map_that_ran_on_another_mesh_asks_to_be_wrapped_again():
    mesh = jax.make_mesh((8,), ("x",))
    total = jax.jit(
        jax.shard_map(lambda a: jax.lax.psum(a, "x"), in_specs=jax.P("x"), out_specs=jax.P())
    )
    a = jax.device_put(jnp.ones(8), jax.NamedSharding(mesh, jax.P("x")))
    with jax.set_mesh(mesh):
        total(a)  # its shard_map now holds this mesh
    with pytest.raises(
        ValueError, match=r"keeps the mesh of its first call .* Wrap the function again"
    ):
        compile_for("h100-8", total, a)
    again = jax.jit(
        jax.shard_map(lambda a: jax.lax.psum(a, "x"), in_specs=jax.P("x"), out_specs=jax.P())
    )
    assert summarise(compile_for("h100-8", again, a)).counts() == {"all-reduce": 1}


def test_two_slices_each_device_says_its_slice_and_host():
    devices = target_devices("v5e-8x2")
    assert TARGETS["v5e-8x2"].slices == 2 and TARGETS["v5e-8x2"].backend == "XLA:TPU"
    assert [d.slice_index for d in devices] == [0] * 8 + [1] * 8
    assert [d.process_index for d in devices] == [0] * 8 + [1] * 8  # one host per v5e-8
    # XLA:GPU's "2x1x8": 2 partitions (NVLink domains) of 1 host, the first of each device's
    # coords. On a cluster each H100 host is a partition, reported as slice_index; the
    # compile-only devices report none, so slice_index is 0 for all of them.
    gpus = target_devices("h100-16")
    assert [d.coords[0] for d in gpus] == [d.process_index for d in gpus] == [0] * 8 + [1] * 8
    assert {d.slice_index for d in gpus} == {0} and TARGETS["h100-16"].slices == 1


@pytest.mark.parametrize(
    "shape, outer",
    [((2, 8), [[0] * 8, [1] * 8]), ((8, 2), [[0, 0]] * 4 + [[1, 1]] * 4)],
)
def test_slices_are_the_outer_axis_of_an_abstract_mesh_on_two_slices(shape, outer):
    abstract = jax.sharding.AbstractMesh(shape, ("a", "b"))
    target_mesh = module._mesh_on(abstract, target_devices("v5e-8x2"))
    assert [[d.slice_index for d in row] for row in target_mesh.devices] == outer


def test_a_mesh_that_does_not_split_over_the_slices_keeps_the_plain_order():
    assert module._split_over((2, 8), 2) == ([2, 1], [1, 8])
    assert module._split_over((16,), 2) == ([2], [8])
    with pytest.raises(ValueError, match="does not split over 4 slices"):
        module._split_over((2, 3), 4)


def test_a_mesh_built_on_the_targets_devices_keeps_its_order():
    devices = target_devices("h100-16")
    swapped = jax.make_mesh((8, 2), ("fsdp", "replica"), devices=devices)
    x = sds(swapped, (64, 128), jax.P(("fsdp", "replica")), jnp.float32)
    compiled = compile_for("h100-16", lambda x: jnp.sum(x, axis=0), x)
    (sharding,) = jax.tree.leaves(compiled.input_shardings)
    assert (sharding.mesh.devices == swapped.devices).all()
    (collective,) = summarise(compiled).collectives
    assert (collective.axes, collective.hosts) == (("fsdp", "replica"), 2)


def test_hsdp_over_two_slices_sends_only_the_gradient_shards_over_dcn():
    hsdp = jax.sharding.AbstractMesh((2, 8), ("replica", "fsdp"))
    w = sds(hsdp, (512, 512), jax.P("fsdp", None))
    x = sds(hsdp, (64, 512), jax.P(("replica", "fsdp")))
    summary = summarise(compile_for("v5e-8x2", jax.grad(loss), w, x))
    dcn = [c for c in summary.collectives if c.dcn]
    assert {(c.kind, c.dcn) for c in dcn} == {("send", "all-reduce"), ("recv", "all-reduce")}
    assert summary.sent_bytes(across="slices") == 512 * 512 // 8 * 2  # a bfloat16 shard
    assert all(c.slices == 1 for c in summary.collectives if not c.dcn)
