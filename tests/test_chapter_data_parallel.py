"""The data-parallelism chapter's claims, read from its recorded outputs, and the HLO check."""

from __future__ import annotations

import ast
import importlib.metadata
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
COUNTERPARTS = read_sections(
    (REPO / "snippets/data_parallel/pytorch_counterparts.out").read_text(encoding="utf-8")
)
# Collectives under both names: XLA:CPU's synchronous op and GPU/TPU's asynchronous one.
ALL_REDUCE = re.compile(r"\ball-reduce(-start)?\(")


def test_four_ways_reach_the_same_parameters():
    lines = RECORDED["compare"].splitlines()
    assert [line.split()[0] for line in lines] == ["pmap", "jit", "shard_map"]
    assert all(line.endswith("max relative difference < 1e-5: True") for line in lines)


def test_integer_labels_train_under_set_mesh_as_on_one_device():
    """modern.md: under jax.set_mesh the integer-label loss trains on the Explicit mesh,
    reaching the single-device loss and accuracy."""
    reference = re.search(
        r"one device: loss ([\d.]+), test accuracy ([\d.]+)", RECORDED["reference"]
    )
    jit = re.search(
        r"jit \+ NamedSharding: loss ([\d.]+), test accuracy ([\d.]+)", RECORDED["jit_train"]
    )
    assert reference.groups() == jit.groups()
    assert "parameter fingerprint" in RECORDED["jit_train"]


def test_donation_deletes_the_arrays_passed_in():
    """modern.md: the donated parameters and optimizer state are deleted by the call, and
    jax.device_put of an array already on the device returns it rather than a copy (so
    each run starts from host values, not from a device_put of device arrays)."""
    assert RECORDED["donation"].splitlines() == [
        "donated arrays deleted: True",
        "jax.device_put(leaf) is leaf: True",
    ]


def test_pmap_accuracy_is_the_single_device_accuracy():
    """pmap-training.md: the pmap run's test accuracy, to the printed precision, is the one
    a single device reaches with the same steps (the parameters agree to 1e-5)."""
    one_device = re.search(
        r"one device: loss [\d.]+, test accuracy ([\d.]+)", RECORDED["reference"]
    )
    pmap = re.search(r"pmap: test accuracy ([\d.]+)", RECORDED["pmap_params"])
    assert one_device[1] == pmap[1] == "0.9579"  # the number pmap-training.md states
    assert "pmap      vs one device: max relative difference < 1e-5: True" in RECORDED["compare"]


def test_one_hot_labels_cost_temporaries_that_integer_labels_do_not():
    """modern.md: on XLA:CPU, the loss and its gradient over 256 x 32,768 logits plan 0 MiB
    of temporaries with integer labels and 64 MiB (twice the logits) with one_hot; the page
    says the 64 MiB is XLA:CPU's plan."""
    temporaries = dict(
        re.findall(r"^(\w+): (\d+) MiB of temporaries \(XLA:CPU\)$", RECORDED["one_hot_cost"], re.M)
    )
    assert temporaries == {"integer_labels": "0", "one_hot_labels": "64"}


def test_over_a_vocabulary_split_integer_labels_fail_and_one_hot_works():
    """modern.md#vocabulary-sharded: under jax.set_mesh, the integer-label loss over logits
    split along "model" raises (a gather); one_hot gives the single-device loss, a gradient
    sharded like the logits, and on XLA:CPU all-reduces of 8 floats per device (one per
    example) over "model" and of the loss over "data", with no all-gather."""
    lines = RECORDED["vocabulary_sharded"].splitlines()
    reference = re.fullmatch(r"one device, integer labels: loss ([\d.]+)", lines[0])[1]
    assert lines[1].startswith("integer_labels: ShardingTypeError: Use `.at[...].get(")
    assert "gather" in RECORDED["vocabulary_sharded"]
    one_hot = next(line for line in lines if line.startswith("one_hot_labels:"))
    assert one_hot == f"one_hot_labels: loss {reference}, gradient float32[16@data,1024@model]"
    reduces = re.findall(r"all-reduce over '(\w+)' of (.*) \(XLA:CPU\)", "\n".join(lines))
    assert {axis for axis, _ in reduces} == {"model", "data"}
    assert all(re.fullmatch(r"\(?f32\[8\](, f32\[8\])*\)?", o) for a, o in reduces if a == "model")
    assert [o for a, o in reduces if a == "data"] == ["f32[]"]
    assert "  all-gather ops: 0" in lines


def test_a_contraction_sharded_on_both_sides_needs_out_sharding_under_the_mesh():
    """modern.md: under jax.set_mesh the matmul still raises; out_sharding= settles it."""
    recorded = RECORDED["out_sharding"]
    assert recorded.startswith("ShardingTypeError: Contracting dimensions are sharded and it is")
    assert "out_sharding=P(): float32[8,4]" in recorded
    assert "out_sharding=P('data',): float32[8@data,4]" in recorded


def test_without_set_mesh_the_integer_label_loss_raises():
    """modern.md quotes the error's first words and says it comes from the scatter."""
    recorded = RECORDED["no_set_mesh"]
    assert recorded.startswith("ShardingTypeError: Use `.at[...].set/add/mul/...(out_sharding=)`")
    assert "scatter" in recorded and "float32[256@data]" in recorded


def test_naive_shard_map_gradients_are_8x():
    ratios = re.findall(r"naive gradient is ([\d.]+)x", RECORDED["naive"])
    assert ratios and all(float(r) == 8.0 for r in ratios)


def test_recorded_jit_step_holds_one_combined_all_reduce_on_cpu():
    """modern.md: on XLA:CPU one all-reduce carries the four gradients and the loss."""
    count = re.search(r"all-reduce ops in the compiled step \(XLA:CPU\): (\d+)", RECORDED["hlo"])
    assert int(count[1]) == 1
    operands = re.search(r"all-reduce of \((.*)\)", RECORDED["hlo"])[1].split(", ")
    assert sorted(operands) == ["f32[10,128]", "f32[10]", "f32[128,64]", "f32[128]", "f32[]"]


def test_compiled_data_parallel_step_all_reduces_the_gradient():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    w = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P()))
    x = jax.device_put(jnp.ones((64, 4)), NamedSharding(mesh, P("data")))

    def loss(w, x):
        return jnp.mean((x @ w) ** 2)

    with jax.set_mesh(mesh):
        hlo = jax.jit(jax.grad(loss)).lower(w, x).compile().as_text()
    assert ALL_REDUCE.search(hlo)


def where(label: str, section: str) -> tuple[int, int, int]:
    """(all-reduce in the loop body, the loop's trip count, all-reduce outside it)."""
    match = re.search(
        rf"{label}: all-reduce in the loop body: (\d+) \(the loop runs (\d+) times\), "
        r"outside it: (\d+)",
        COUNTERPARTS[section],
    )
    return int(match[1]), int(match[2]), int(match[3])


def test_sampler_gives_each_device_its_own_examples_and_reshuffles_each_epoch():
    """coming-from-pytorch.md: a host permutation from SEED + epoch, a batch of 16 sharded
    along "data": devices hold disjoint examples, and the next epoch has another order."""
    held = re.findall(r"epoch (\d): devices 0-2 hold examples (\[.*\])", COUNTERPARTS["sampler"])
    assert [epoch for epoch, _ in held] == ["0", "1"]
    epochs = [ast.literal_eval(rows) for _, rows in held]
    for rows in epochs:
        examples = [e for row in rows for e in row]
        assert len(examples) == len(set(examples)) == 6  # 2 per device on 8 devices, disjoint
    assert epochs[0] != epochs[1]


def test_scan_accumulation_all_reduces_inside_the_loop():
    """coming-from-pytorch.md: jit + scan over a sharded batch reduces once per micro-batch."""
    assert where("scan", "loop_collectives") == (1, 4, 0)
    assert "4 micro-batches == one batch of 256: True" in COUNTERPARTS["accumulation"]


def test_shard_map_accumulation_reduces_once_after_the_loop_with_the_same_result():
    """coming-from-pytorch.md: DDP's no_sync, as shard_map accumulation and one pmean."""
    assert where("shard_map", "no_sync") == (0, 4, 1)
    assert "shard_map == scan, largest difference below 1e-6: True" in COUNTERPARTS["no_sync"]


def test_multisteps_all_reduces_on_every_call_and_updates_every_fourth():
    recorded = COUNTERPARTS["multisteps"]
    changed = re.findall(r"after micro-batch \d: parameters changed: (\w+)", recorded)
    assert changed == ["False", "False", "False", "True"]
    assert "MultiSteps: all-reduce per call: 1" in recorded
    assert "MultiSteps == one step on the large batch: True" in recorded


# The pmap pages: first-example.md, pmap-in-depth.md and migrating-from-pmap.md.
LINEAR_REGRESSION = read_sections(
    (REPO / "snippets/data_parallel/linear_regression.out").read_text(encoding="utf-8")
)
PMAP_IN_DEPTH = read_sections(
    (REPO / "snippets/data_parallel/pmap_in_depth.out").read_text(encoding="utf-8")
)
PMAP_MIGRATION = read_sections(
    (REPO / "snippets/data_parallel/pmap_migration.out").read_text(encoding="utf-8")
)


def test_first_example_pmap_and_jit_match_step_by_step():
    """first-example.md: 8 slices of 16 points, the same losses at every printed step, the
    same parameters, close to the true w = 2 and b = -1."""
    assert "replicated w: (8,) x_split: (8, 16, 1)" in LINEAR_REGRESSION["pmap_inputs"]
    assert LINEAR_REGRESSION["pmap_train"] == LINEAR_REGRESSION["jit_update"]
    assert "pmap and jit reach the same parameters: True" in LINEAR_REGRESSION["compare"]
    found = re.search(r"pmap: w = ([-\d.]+), b = ([-\d.]+)", LINEAR_REGRESSION["pmap_result"])
    w, b = float(found[1]), float(found[2])
    assert abs(w - 2) < 0.05 and abs(b + 1) < 0.05
    # donate_argnums=0 deletes the parameters passed in.
    assert LINEAR_REGRESSION["pmap_donation"].strip() == "parameters passed in deleted: True"


def test_x0_of_a_pmap_result_compiles_to_a_collective_and_fails_on_explicit_axes():
    """pmap-in-depth.md#indexing, also cited by first-example.md and pmap-training.md: on
    XLA:CPU `totals[0]` compiles to one all-reduce; on Explicit axes `x[0]` of a sharded
    dimension raises even under jax.set_mesh; out_axes=None returns a replicated value."""
    recorded = PMAP_IN_DEPTH["indexing"]
    assert "totals[0] compiles to: ['all-reduce']" in recorded
    # A shard of the stack is a (1,) block; .data[0] is the value.
    assert "addressable_shards[0].data: [28.] shape (1,) -> .data[0]: 28.0" in recorded
    assert "explicit x[0]: ShardingTypeError - Use `.at[...].get(out_sharding=)`" in recorded
    assert "out_axes=None: 28.0 shape () sharding P()" in PMAP_IN_DEPTH["out_axes"]


def test_x0_of_a_stack_of_copies_holds_a_collective():
    """The same claim, compiled here rather than read from the recording."""
    totals = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(jnp.arange(8.0))
    hlo = jax.jit(lambda t: t[0]).lower(totals).compile().as_text()
    assert re.search(r"\b(all-reduce|all-gather|collective-permute|all-to-all)(-start)?\(", hlo)


def test_every_migration_row_agrees_with_pmap():
    """migrating-from-pmap.md: each replacement gives pmap's values; shard_map and smap keep
    the mapped axis as a block; out_specs=P() returns one replicated value; the jit donates."""
    text = "\n".join(PMAP_MIGRATION.values())
    assert all(f"jax.{old} exists: False" in text for old in ("device_put_replicated", "tree_map"))
    for agreement in (
        "pmap == shard_map: True",
        "psum over axis 'i' agrees: True",
        "pmap == smap: True",
        "gradient: pmap + pmean == jit on a sharded batch: True",
    ):
        assert agreement in text
    assert "per-device shape: pmap (2,) shard_map (1, 2)" in PMAP_MIGRATION["in_axes"]
    assert "per-device shape: smap (1, 2)" in PMAP_MIGRATION["smap"]
    assert "out_axes=None -> out_specs=P(): 120.0 120.0 P()" in PMAP_MIGRATION["out_axes"]
    assert "w deleted: True" in PMAP_MIGRATION["training"]


def migration_page(language: str) -> str:
    return (REPO / "docs" / language / "data-parallel/migrating-from-pmap.md").read_text(
        encoding="utf-8"
    )


def test_flax_unreplicate_reads_device_0_while_x0_lands_on_every_device():
    """migrating-from-pmap.md#unreplicate and pmap-training.md: in the pinned Flax (the
    0.12.12 the pages name), unreplicate returns device 0's shard, so its result stays on
    device 0; x[0] puts its result on every device (its all-reduce is recorded in
    pmap_in_depth.out and checked above)."""
    recorded = PMAP_MIGRATION["unreplicate"]
    assert "flax.jax_utils.unreplicate: on devices [0]\n" in recorded
    assert "x[0]: on devices [0, 1, 2, 3, 4, 5, 6, 7]" in recorded
    assert importlib.metadata.version("flax") == "0.12.12"
    for language in ("en", "zh", "ko"):
        assert "0.12.12" in migration_page(language)


def test_random_keys_change_when_a_pmap_step_is_ported():
    """migrating-from-pmap.md#random-keys: one broadcast key gives every device the same
    mask under pmap; under jit one key over the sharded batch is the single-device draw;
    fold_in(key, axis_index) gives each device its own mask inside shard_map."""
    assert PMAP_MIGRATION["random_keys"].splitlines() == [
        "pmap, one key: every device's mask identical: True",
        "pmap, split keys: masks differ between devices: True",
        "jit, one key: sharded draw == one device's draw: True",
        "shard_map, fold_in: masks differ between devices: True",
    ]


def test_batch_norm_statistics_are_per_device_under_pmap_and_global_under_jit():
    """migrating-from-pmap.md#batch-norm states the running means of device 0, device 7 and
    the global batch, in every language."""
    assert PMAP_MIGRATION["batch_norm"].splitlines() == [
        "pmap, no axis_name: running mean on device 0 [1. 2.] on device 7 [29. 30.]",
        "jit, sharded batch: running mean [15. 16.]",
        "  outputs equal to pmap's: False",
        "pmap with axis_name='i' == jit: True",
    ]
    for language in ("en", "zh", "ko"):
        section = migration_page(language).split("{#batch-norm}")[1]
        assert all(f"`{mean}`" in section for mean in ("[1. 2.]", "[29. 30.]", "[15. 16.]"))
