"""Tests of jaxpar.compiled: the memory and the collectives of a compiled program."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import Collective, CompiledSummary, find_collectives, summarise


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((8,), ("data",))


def split_rows(mesh, shape=(64, 32)) -> jax.Array:
    return jax.device_put(jnp.ones(shape), NamedSharding(mesh, P("data")))


class TestSummarise:
    def test_memory_parts_and_one_all_reduce(self, mesh):
        x = split_rows(mesh)
        with jax.set_mesh(mesh):
            compiled = jax.jit(lambda x: x.sum(axis=0)).lower(x).compile()
        summary = summarise(compiled)
        memory = compiled.memory_analysis()
        assert summary.argument_bytes == memory.argument_size_in_bytes == 8 * 32 * 4
        assert summary.output_bytes == memory.output_size_in_bytes == 32 * 4
        assert summary.temp_bytes == memory.temp_size_in_bytes
        assert summary.alias_bytes == 0
        assert summary.generated_code_bytes == memory.generated_code_size_in_bytes
        assert summary.flops is not None and summary.flops > 0
        assert summary.counts() == {"all-reduce": 1}
        assert summary.by_kind() == {"all-reduce": (1, 32 * 4)}
        (collective,) = summary.collectives
        assert (collective.kind, collective.in_loop, collective.asynchronous) == (
            "all-reduce",
            False,
            False,
        )
        assert summary.total_bytes == (
            summary.argument_bytes + summary.output_bytes + summary.temp_bytes
        )

    def test_no_collectives_on_data_that_is_not_split(self):
        compiled = jax.jit(lambda x: x * 2).lower(jnp.ones(4)).compile()
        summary = summarise(compiled)
        assert summary.collectives == ()
        assert summary.counts() == {}
        assert "no collectives" in str(summary)

    def test_donation_shows_as_aliased_bytes(self):
        step = jax.jit(lambda x: x + 1, donate_argnums=0)
        summary = summarise(step.lower(jnp.ones((16, 16))).compile())
        assert summary.alias_bytes == 16 * 16 * 4
        assert summary.total_bytes == 16 * 16 * 4 + summary.temp_bytes

    def test_a_collective_in_a_scan_is_in_a_loop(self, mesh):
        x = jax.device_put(jnp.ones((4, 64)), NamedSharding(mesh, P(None, "data")))

        def per_row_then_all(x):
            rows = jax.lax.scan(lambda carry, row: (carry, row.sum()), 0.0, x)[1]
            return rows, x.sum(axis=1)

        with jax.set_mesh(mesh):
            summary = summarise(jax.jit(per_row_then_all).lower(x).compile())
        assert summary.counts(in_loop=True) == {"all-reduce": 1}
        assert summary.counts(in_loop=False) == {"all-reduce": 1}
        assert summary.counts() == {"all-reduce": 2}
        assert "all-reduce x1 in a loop: 4 B" in str(summary)

    def test_str_lists_memory_then_collectives(self, mesh):
        x = split_rows(mesh)
        with jax.set_mesh(mesh):
            summary = summarise(jax.jit(lambda x: x.sum(axis=0)).lower(x).compile())
        lines = str(summary).splitlines()
        assert lines[0] == "arguments    1,024 B"
        assert lines[1] == "outputs      128 B"
        assert lines[-1] == "all-reduce x1: 128 B"

    def test_in_loop_must_be_a_bool_or_none(self):
        summary = CompiledSummary(1, 1, 0, 0, 0, None, ())
        with pytest.raises(TypeError, match="in_loop must be True, False or None, got 'yes'"):
            summary.counts(in_loop="yes")

    def test_sizes_a_backend_does_not_report(self):
        summary = CompiledSummary(None, None, None, None, None, None, ())
        assert summary.total_bytes is None
        assert str(summary).splitlines()[0] == "arguments    not reported"


class TestBadInput:
    def test_a_jitted_function_not_lowered(self):
        def step(x):
            return x * 2

        with pytest.raises(TypeError) as error:
            summarise(jax.jit(step))
        message = str(error.value)
        assert "got the jitted function 'step'" in message
        assert "summarise(f.lower(*args).compile())" in message

    def test_a_lowered_program_not_compiled(self):
        lowered = jax.jit(lambda x: x * 2).lower(jnp.ones(4))
        with pytest.raises(TypeError, match=r"got a lowered one; compile it first"):
            summarise(lowered)

    def test_a_traced_program(self):
        traced = jax.jit(lambda x: x * 2).trace(jnp.ones(4))
        with pytest.raises(TypeError, match=r"summarise\(traced\.lower\(\)\.compile\(\)\)"):
            summarise(traced)

    def test_a_plain_function(self):
        def loss(x):
            return x.sum()

        with pytest.raises(TypeError, match=r"got the function 'loss'.*jax\.jit\(f\)"):
            summarise(loss)

    @pytest.mark.parametrize("value", [None, 3, "HloModule m"])
    def test_anything_else(self, value):
        with pytest.raises(TypeError, match="summarise needs a compiled program"):
            summarise(value)

    def test_find_collectives_needs_text(self):
        with pytest.raises(TypeError, match="got bytes"):
            find_collectives(b"HloModule m")

    def test_find_collectives_needs_a_computation(self):
        with pytest.raises(ValueError, match="found no HLO computation"):
            find_collectives("this is not HLO")


# Hand-written HLO in the forms GPU and TPU compilers print: asynchronous pairs, tuple
# results with index comments, and a collective in a computation that a loop body calls.
ASYNC_HLO = """\
HloModule jit_step, entry_computation_layout={(f32[8,4]{1,0})->f32[64,4]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%inner (p: bf16[16]) -> bf16[16] {
  %p = bf16[16]{0} parameter(0)
  ROOT %all-reduce.9 = bf16[16]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add
}

%body (carry: (s32[], bf16[16])) -> (s32[], bf16[16]) {
  %carry = (s32[], bf16[16]{0}) parameter(0)
  %v = bf16[16]{0} get-tuple-element(%carry), index=1
  %reduced = bf16[16]{0} call(%v), to_apply=%inner
  %i = s32[] get-tuple-element(%carry), index=0
  ROOT %t = (s32[], bf16[16]{0}) tuple(%i, %reduced)
}

%condition (carry: (s32[], bf16[16])) -> pred[] {
  %carry = (s32[], bf16[16]{0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (x: f32[8,4]) -> f32[64,4] {
  %x = f32[8,4]{1,0} parameter(0)
  %all-gather-start = (f32[8,4]{1,0}, f32[64,4]{1,0}) all-gather-start(%x), dimensions={0}
  %all-gather-done = f32[64,4]{1,0} all-gather-done(%all-gather-start)
  %all-reduce-start = (f32[64,4]{1,0}, /*index=1*/f32[4]{0}) all-reduce-start(%all-gather-done, %x), to_apply=%add
  %all-reduce-done = (f32[64,4]{1,0}, /*index=1*/f32[4]{0}) all-reduce-done(%all-reduce-start)
  %zero = s32[] constant(0)
  %init = bf16[16]{0} broadcast(%zero), dimensions={}
  %tuple = (s32[], bf16[16]{0}) tuple(%zero, %init)
  %loop = (s32[], bf16[16]{0}) while(%tuple), condition=%condition, body=%body
  ROOT %out = f32[64,4]{1,0} get-tuple-element(%all-reduce-done), index=0
}
"""


class TestFindCollectives:
    def test_asynchronous_pairs_count_once_with_the_done_result(self):
        found = {c.name: c for c in find_collectives(ASYNC_HLO)}
        assert set(found) == {"all-gather-start", "all-reduce-start", "all-reduce.9"}
        gather = found["all-gather-start"]
        assert (gather.kind, gather.asynchronous, gather.result_bytes) == (
            "all-gather",
            True,
            64 * 4 * 4,
        )
        reduce = found["all-reduce-start"]
        assert (reduce.kind, reduce.result_bytes) == ("all-reduce", 64 * 4 * 4 + 4 * 4)

    def test_a_loop_body_and_what_it_calls_are_in_the_loop(self):
        found = {c.name: c for c in find_collectives(ASYNC_HLO)}
        assert found["all-reduce.9"].in_loop
        assert found["all-reduce.9"].result_bytes == 16 * 2  # bfloat16
        assert not found["all-gather-start"].in_loop

    def test_the_summary_of_hand_written_collectives(self):
        summary = CompiledSummary(0, 0, 0, 0, 0, None, tuple(find_collectives(ASYNC_HLO)))
        assert summary.by_kind(in_loop=False) == {
            "all-gather": (1, 1024),
            "all-reduce": (1, 1040),
        }
        assert summary.by_kind(in_loop=True) == {"all-reduce": (1, 32)}
        assert isinstance(summary.collectives[0], Collective)


# The three forms XLA prints replica groups in, a generic async-start wrapper (XLA:GPU's
# reduce-scatter), and a collective-permute-start, whose tuple holds two u32 contexts.
GROUPS_HLO = """\
HloModule jit_step, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%wrapped_reduce_scatter (p: f32[64]) -> f32[8] {
  %p = f32[64]{0} parameter(0)
  ROOT %reduce-scatter.1 = f32[8]{0} reduce-scatter(%p), replica_groups={}, dimensions={0}, to_apply=%add
}

ENTRY %main (x: f32[64], b: bf16[32]) -> f32[64] {
  %x = f32[64]{0} parameter(0)
  %b = bf16[32]{0} parameter(1)
  %all-reduce.1 = f32[64]{0} all-reduce(%x), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  %all-reduce.2 = f32[64]{0} all-reduce(%x), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%add
  %all-gather.1 = bf16[64]{0} all-gather(%b), replica_groups=mesh['data'=2,'model'=4] {'data'}, dimensions={0}
  %all-gather.2 = f32[512]{0} all-gather(%x), replica_groups=mesh['data'=2,'model'=4] {'data','model'}, dimensions={0}
  %rs-start = ((f32[64]{0}), f32[8]{0}) async-start(%x), calls=%wrapped_reduce_scatter
  %rs-done = f32[8]{0} async-done(%rs-start)
  %cp-start = (f32[64]{0}, f32[64]{0}, u32[], u32[]) collective-permute-start(%x), source_target_pairs={{0,1},{1,0}}
  %cp-done = f32[64]{0} collective-permute-done(%cp-start)
  ROOT %out = f32[64]{0} add(%all-reduce.1, %cp-done)
}
"""


class TestGroupsAndTraffic:
    def test_group_sizes_in_every_form(self):
        found = {c.name: c for c in find_collectives(GROUPS_HLO)}
        assert found["all-reduce.1"].group_size == 4  # a list of groups
        assert found["all-reduce.2"].group_size == 2  # an iota: 4 groups of 2
        assert found["all-gather.1"].group_size == 2  # mesh axes: "data"
        assert found["all-gather.2"].group_size == 8  # "data" and "model"
        assert found["reduce-scatter.1"].group_size == 8  # {}: every partition
        assert found["cp-start"].group_size is None  # pairs, not groups

    def test_ring_model_bytes_each_device_sends(self):
        found = {c.name: c for c in find_collectives(GROUPS_HLO)}
        assert found["all-reduce.1"].sent_bytes == 2 * 256 * 3 // 4
        assert found["all-reduce.2"].sent_bytes == 256  # 2 x (1/2)
        assert found["all-gather.1"].sent_bytes == 128 // 2  # bf16[64], half of it
        assert found["reduce-scatter.1"].sent_bytes == 32 * 7  # (n - 1) x its result
        assert found["cp-start"].sent_bytes == 256  # its buffer, once

    def test_asynchronous_forms_count_once(self):
        found = {c.name: c for c in find_collectives(GROUPS_HLO)}
        assert len(find_collectives(GROUPS_HLO)) == 6  # no -done, no async-start counted
        scatter = found["reduce-scatter.1"]
        assert (scatter.asynchronous, scatter.result_bytes) == (True, 32)  # inside async-start
        permute = found["cp-start"]  # the -done's f32[64], not the 4-tuple of the -start
        assert (permute.kind, permute.asynchronous, permute.result_bytes) == (
            "collective-permute",
            True,
            256,
        )

    def test_element_types(self):
        found = {c.name: c for c in find_collectives(GROUPS_HLO)}
        assert found["all-gather.1"].element_types == ("bf16",)
        assert found["all-reduce.1"].element_types == ("f32",)

    def test_by_group(self):
        summary = CompiledSummary(0, 0, 0, 0, 0, None, tuple(find_collectives(GROUPS_HLO)))
        groups = summary.by_group()
        assert groups[("all-reduce", 2)] == (1, 256, 256)
        assert groups[("all-reduce", 4)] == (1, 256, 384)
        assert groups[("collective-permute", None)] == (1, 256, 256)
        assert list(groups)[0] == ("all-gather", 2)  # sorted by kind, then group size

    def test_a_compiled_program_on_a_2d_mesh(self):
        mesh = jax.make_mesh((2, 4), ("data", "model"))
        x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("data", "model")))
        with jax.set_mesh(mesh):
            compiled = jax.jit(lambda x: x.sum(axis=1)).lower(x).compile()
        (collective,) = summarise(compiled).collectives
        assert (collective.kind, collective.group_size) == ("all-reduce", 4)  # over "model"
        assert collective.sent_bytes == 2 * collective.result_bytes * 3 // 4


class TestRunsPerCall:
    def test_a_collective_in_nested_scans_runs_the_product_of_their_lengths(self, mesh):
        x = jax.device_put(jnp.ones((3, 4, 64)), NamedSharding(mesh, P(None, None, "data")))

        def per_row(x):  # a scan over 3, around a scan over 4: 12 sums over the devices
            def outer(carry, rows):
                return carry, jax.lax.scan(lambda c, row: (c, row.sum()), 0.0, rows)[1]

            return jax.lax.scan(outer, 0.0, x)[1], x.sum()

        with jax.set_mesh(mesh):
            summary = summarise(jax.jit(per_row).lower(x).compile())
        runs = sorted((c.in_loop, c.runs) for c in summary.collectives)
        assert runs == [(False, 1), (True, 12)]

    def test_a_loop_without_a_known_trip_count(self):
        found = {c.name: c for c in find_collectives(ASYNC_HLO)}
        assert found["all-reduce.9"].runs is None  # the hand-written loop has no count
        assert found["all-gather-start"].runs == 1


# XLA:GPU's CollectivePermuteDecomposer: a permute in a loop as send/recv pairs.
SEND_RECV_HLO = """\
HloModule jit_pipeline, num_partitions=2

ENTRY %main (x: f32[64]) -> f32[64] {
  %x = f32[64]{0} parameter(0)
  %after-all = token[] after-all()
  %recv = (f32[64]{0}, u32[], token[]) recv(%after-all), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  %send = (f32[64]{0}, u32[], token[]) send(%x, %after-all), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  %recv-done = (f32[64]{0}, token[]) recv-done(%recv), channel_id=1
  %send-done = token[] send-done(%send), channel_id=1
  ROOT %data = f32[64]{0} get-tuple-element(%recv-done), index=0
}
"""


def test_send_and_recv_count_once_each_with_their_data():
    found = {c.kind: c for c in find_collectives(SEND_RECV_HLO)}
    assert set(found) == {"send", "recv"}  # the -done halves are not counted again
    for collective in found.values():
        assert (collective.result_bytes, collective.asynchronous) == (256, True)
    assert (found["send"].sent_bytes, found["recv"].sent_bytes) == (256, 0)


HLO = Path(__file__).parent / "hlo"


class TestThreeBackends:
    """Recorded optimised HLO of one program per backend: XLA:CPU run here, XLA:GPU for 8
    H100s and XLA:TPU for a TPU v5e-8 compiled by jaxpar.compile_for (tests/hlo/; metadata
    and most backend_config stripped). fsdp8: 8 bfloat16 layers, each weight gathered
    over 8 devices, its gradient constrained back to its shard. scan: 4 layers under
    lax.scan on a 2 x 4 mesh, each weight gathered over "model" in the loop."""

    @staticmethod
    def kinds(backend: str, program: str = "fsdp8", mesh=None) -> dict:
        text = (HLO / f"{program}_{backend}.txt").read_text()
        found: dict = {}
        for c in find_collectives(text, mesh):
            key = (c.kind, c.element_types, c.asynchronous, c.group_size)
            found[key] = found.get(key, 0) + 1
        return found

    def test_cpu_widens_bfloat16_and_has_no_reduce_scatter_or_async_pairs(self):
        assert self.kinds("cpu") == {
            ("all-gather", ("f32",), False, 8): 8,
            ("all-reduce", ("f32",), False, 8): 1,  # 8 gradients and the loss, one tuple
        }

    def test_gpu_combines_into_async_bfloat16_pairs_and_a_reduce_scatter(self):
        assert self.kinds("gpu") == {
            ("all-gather", ("bf16",), False, 8): 1,
            ("all-gather", ("bf16",), True, 8): 2,  # all-gather-start/-done of 3 weights
            ("reduce-scatter", ("bf16",), True, 8): 1,  # all 8 gradients in one tuple
            ("all-reduce", ("f32",), True, 8): 1,  # the loss, in a fusion-start kernel
        }
        scatter = next(
            c
            for c in find_collectives((HLO / "fsdp8_gpu.txt").read_text())
            if c.kind == "reduce-scatter"
        )
        assert scatter.result_bytes == 8 * 2048 * 256 * 2  # the -done's shards, not the inputs

    def test_tpu_all_reduce_scatter_fusions_and_async_collective_fusions(self):
        assert self.kinds("tpu") == {
            ("all-gather", ("bf16",), False, 8): 6,
            # overlapped with a matmul: each written as clones of one channel, counted once
            ("all-gather", ("bf16",), True, 8): 2,
            ("reduce-scatter", ("bf16",), False, 8): 8,  # all-reduce + slice, per gradient
            ("all-reduce", ("f32",), False, 8): 1,
        }
        scatters = [
            c
            for c in find_collectives((HLO / "fsdp8_tpu.txt").read_text())
            if c.kind == "reduce-scatter"
        ]
        assert {c.result_bytes for c in scatters} == {2048 * 256 * 2}

    @pytest.mark.parametrize("backend", ["cpu", "gpu", "tpu"])
    def test_loop_trip_counts_and_mesh_axes(self, backend):
        mesh = jax.make_mesh((2, 4), ("data", "model"))
        found = find_collectives((HLO / f"scan_{backend}.txt").read_text(), mesh)
        assert [(c.kind, c.in_loop, c.runs, c.group_size, c.axes) for c in found] == [
            ("all-gather", True, 4, 4, ("model",)),
            ("all-reduce", True, 4, 2, ("data",)),
        ]

    @pytest.mark.parametrize(
        "groups, axes",
        [
            ("{{0,1,2,3},{4,5,6,7}}", ("model",)),
            ("{{0,4},{1,5},{2,6},{3,7}}", ("data",)),
            ("[2,4]<=[8]", ("model",)),
            ("[4,2]<=[2,4]T(1,0)", ("data",)),
            ("{}", ("data", "model")),
            ("mesh['data'=2,'model'=4] {'data'}", ("data",)),
            ("{{0,1},{2,3},{4,5},{6,7}}", None),  # half of "model": not a whole axis
        ],
    )
    def test_every_form_of_replica_groups_names_its_axes(self, groups, axes):
        mesh = jax.make_mesh((2, 4), ("data", "model"))
        text = (
            "HloModule m, num_partitions=8\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
            "  %p = f32[4]{0} parameter(0)\n"
            f"  ROOT %all-reduce = f32[4]{{0}} all-reduce(%p), replica_groups={groups}, to_apply=%add\n}}\n"
        )
        (collective,) = find_collectives(text, mesh)
        assert collective.axes == axes


class TestHostsAndSlices:
    """Which collectives cross hosts (process_index) or TPU slices (slice_index): recorded
    HLO of a step on a 512 x 512 weight, read with meshes of jaxpar.target_devices.
    hosts_gpu: 2 hosts of 8 H100s, mesh ("fsdp", "replica") of shape (8, 2), so that
    "fsdp" spans the hosts. slices_tpu: 2 TPU v5e-8 slices, mesh ("replica", "fsdp") of
    shape (2, 8), the weight split over both axes (FSDP over all 16 chips)."""

    @staticmethod
    def gpu_mesh(shape=(8, 2), names=("fsdp", "replica")) -> jax.sharding.Mesh:
        from jaxpar import target_devices

        return jax.make_mesh(shape, names, devices=target_devices("h100-16"))

    @staticmethod
    def tpu_mesh() -> jax.sharding.Mesh:
        from jax.experimental import mesh_utils

        from jaxpar import target_devices

        devices = mesh_utils.create_hybrid_device_mesh((1, 8), (2, 1), target_devices("v5e-8x2"))
        return jax.sharding.Mesh(devices, ("replica", "fsdp"))

    def test_gpu_collectives_along_an_axis_that_spans_the_hosts(self):
        found = find_collectives((HLO / "hosts_gpu.txt").read_text(), self.gpu_mesh())
        assert [(c.kind, c.axes, c.hosts, c.slices) for c in found] == [
            ("all-reduce", ("replica",), 1, 1),  # the replicas of a shard: one host
            ("all-gather", ("fsdp",), 2, 1),  # the shards: both hosts
            ("reduce-scatter", ("fsdp",), 2, 1),
        ]

    def test_tpu_splits_a_collective_over_slices_into_ici_and_dcn_parts(self):
        found = find_collectives((HLO / "slices_tpu.txt").read_text(), self.tpu_mesh())
        ici = [(c.kind, c.axes, c.slices) for c in found if c.dcn is None]
        assert set(ici) == {("all-gather", ("fsdp",), 1), ("reduce-scatter", ("fsdp",), 1)}
        dcn = [(c.kind, c.dcn, c.slices, c.hosts) for c in found if c.dcn]
        assert dcn == [
            ("send", "all-gather", 2, None),  # the HLO names no groups for DCN transfers
            ("recv", "all-gather", 2, None),
            ("send", "all-reduce", 2, None),
            ("recv", "all-reduce", 2, None),
        ]

    def test_bytes_sent_across_hosts_and_slices(self):
        gpu = CompiledSummary(
            0,
            0,
            0,
            0,
            0,
            None,
            tuple(find_collectives((HLO / "hosts_gpu.txt").read_text(), self.gpu_mesh())),
        )
        crossing = [c.sent_bytes for c in gpu.collectives if c.hosts == 2]
        assert gpu.sent_bytes(across="hosts") == sum(crossing) == 524288 * 7 // 8 + 65536 * 7
        assert gpu.sent_bytes() == gpu.sent_bytes(across="hosts") + 65536  # + the all-reduce
        assert gpu.sent_bytes(across="slices") == 0  # compile-only GPUs: all slice_index 0
        tpu = CompiledSummary(
            0,
            0,
            0,
            0,
            0,
            None,
            tuple(find_collectives((HLO / "slices_tpu.txt").read_text(), self.tpu_mesh())),
        )
        assert tpu.sent_bytes(across="slices") == 32768 + 65536  # the two DCN sends' data
        assert tpu.sent_bytes(across="hosts") is None  # DCN transfers name no hosts

    def test_without_a_mesh_of_devices_the_spans_are_unknown(self):
        found = find_collectives((HLO / "hosts_gpu.txt").read_text())
        assert {(c.hosts, c.slices) for c in found} == {(None, None)}
        summary = CompiledSummary(0, 0, 0, 0, 0, None, tuple(found))
        assert summary.sent_bytes(across="hosts") is None and summary.sent_bytes() > 0
        cpu = find_collectives(
            (HLO / "scan_cpu.txt").read_text(), jax.make_mesh((2, 4), ("a", "b"))
        )
        assert {(c.hosts, c.slices) for c in cpu} == {(1, None)}  # CPU devices: no slice_index

    def test_across_must_be_hosts_or_slices(self):
        with pytest.raises(
            ValueError, match=r"across must be None, 'hosts' or 'slices', got 'host'"
        ):
            CompiledSummary(0, 0, 0, 0, 0, None, ()).sent_bytes(across="host")

    @pytest.mark.parametrize(
        "attribute, hosts",
        [
            ("replica_groups={{0,1},{2,3},{6,9},{10,11},{4,5},{7,8},{12,13},{14,15}}", 2),
            ("replica_groups={{0,1},{2,3},{4,5},{6,7},{8,9},{10,11},{12,13},{14,15}}", 1),
            ("replica_groups=[2,8]<=[16]", 1),
            ("replica_groups=[8,2]<=[2,8]T(1,0)", 2),
            ("replica_groups=mesh['hosts'=2,'gpus'=8] {'hosts'}", 2),
            ("replica_groups=mesh['hosts'=2,'gpus'=8] {'gpus'}", 1),
        ],
    )
    def test_the_widest_group_decides(self, attribute, hosts):
        text = (
            "HloModule m, num_partitions=16\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
            "  %p = f32[4]{0} parameter(0)\n"
            f"  ROOT %all-reduce = f32[4]{{0}} all-reduce(%p), {attribute}, to_apply=%add\n}}\n"
        )
        (collective,) = find_collectives(text, self.gpu_mesh((2, 8), ("hosts", "gpus")))
        assert collective.hosts == hosts

    @pytest.mark.parametrize("pairs, hosts", [("{{0,1},{1,2}}", 1), ("{{0,1},{7,8}}", 2)])
    def test_a_collective_permute_crosses_where_a_pair_does(self, pairs, hosts):
        text = (
            "HloModule m, num_partitions=16\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
            "  %p = f32[4]{0} parameter(0)\n"
            f"  ROOT %cp = f32[4]{{0}} collective-permute(%p), source_target_pairs={pairs}\n}}\n"
        )
        (collective,) = find_collectives(text, self.gpu_mesh((16,), ("x",)))
        assert (collective.group_size, collective.hosts) == (None, hosts)
