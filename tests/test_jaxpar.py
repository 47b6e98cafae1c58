"""Unit tests of jaxpar, its bad-input errors included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import (
    DevicesAlreadyInitializedError,
    UnevenBatchError,
    initialize_distributed,
    replicate,
    shard_batch,
    simulate_cpu_devices,
    split_batch,
)

SRC = Path(__file__).resolve().parents[1] / "src"


class TestSimulateCpuDevices:
    def test_same_count_after_initialisation_is_harmless(self):
        jax.devices()
        simulate_cpu_devices(8)
        assert jax.device_count() == 8

    def test_other_count_after_initialisation_names_values_and_fix(self):
        jax.devices()
        with pytest.raises(DevicesAlreadyInitializedError) as caught:
            simulate_cpu_devices(4)
        message = str(caught.value)
        assert "already initialised its devices with 8 CPU devices" in message
        assert "cannot switch to 4" in message
        assert "right after `import jax`" in message
        assert "JAX_NUM_CPU_DEVICES=4" in message

    def test_a_numpy_integer_is_a_count(self):
        jax.devices()
        simulate_cpu_devices(np.int64(8))
        with pytest.raises(DevicesAlreadyInitializedError, match="cannot switch to 4"):
            simulate_cpu_devices(np.int32(4))

    @pytest.mark.parametrize("count", [0, -2, 2.5, "8", True, None, np.int64(0)])
    def test_bad_count(self, count):
        with pytest.raises(
            ValueError, match=re.escape(f"positive integer count of devices, got {count!r}")
        ):
            simulate_cpu_devices(count)

    def test_before_initialisation_sets_the_count(self):
        code = (
            "import jax\nfrom jaxpar import simulate_cpu_devices\n"
            "simulate_cpu_devices(3)\nprint(jax.device_count())"
        )
        env = {"JAX_PLATFORMS": "cpu", "PATH": ""}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "3"


class TestSplitBatch:
    def test_splits_every_leaf(self):
        batch = {"x": np.arange(64).reshape(32, 2), "y": np.arange(32)}
        split = split_batch(batch, num_devices=8)
        assert split["x"].shape == (8, 4, 2)
        assert split["y"].shape == (8, 4)
        np.testing.assert_array_equal(split["y"][1], [4, 5, 6, 7])

    def test_default_is_the_local_device_count(self):
        assert split_batch(np.zeros((16, 3))).shape == (8, 2, 3)

    def test_output_feeds_pmap(self):
        split = split_batch(np.ones((16, 3), np.float32))
        total = jax.pmap(lambda x: jax.lax.psum(x.sum(), "d"), axis_name="d")(split)
        np.testing.assert_allclose(np.asarray(total), 48.0)

    def test_uneven_batch_names_sizes_and_remedies(self):
        with pytest.raises(UnevenBatchError) as caught:
            split_batch(np.zeros((130, 3)), num_devices=8)
        message = str(caught.value)
        for part in [
            "130 examples",
            "8 devices",
            "(128 or 136)",
            "drop the last 2",
            "pad the batch to 136",
        ]:
            assert part in message

    def test_batch_smaller_than_device_count(self):
        with pytest.raises(UnevenBatchError, match="5 examples is too small for 8 devices"):
            split_batch(np.zeros(5), num_devices=8)

    def test_leaves_with_different_sizes(self):
        with pytest.raises(UnevenBatchError, match=r"different leading sizes \[8, 16\]"):
            split_batch({"x": np.zeros(8), "y": np.zeros(16)}, num_devices=8)

    def test_scalar_leaf(self):
        with pytest.raises(
            ValueError, match=r"needs a leading batch axis, but \['step'\] is a scalar, int 3"
        ):
            split_batch({"x": np.zeros(8), "step": 3}, num_devices=8)

    @pytest.mark.parametrize(
        ("batch", "shown", "count"),
        [
            (list(range(1, 9)), "list [1, 2, 3, 4, 5, 6, ...]", 8),
            ([[1, 2], [3]], "list [[1, 2], [3]]", 3),
        ],
    )
    def test_a_python_list_says_to_use_an_array(self, batch, shown, count):
        with pytest.raises(ValueError) as caught:
            split_batch(batch, num_devices=8)
        message = str(caught.value)
        assert f"the batch is the Python {shown}" in message
        assert f"a pytree of {count} separate scalars, not as the rows of an array" in message
        assert "np.asarray(batch)" in message

    def test_a_list_inside_the_batch_says_to_use_an_array(self):
        with pytest.raises(ValueError) as caught:
            split_batch({"x": np.zeros((8, 2)), "y": [0, 1, 2, 3, 4, 5, 6, 7]}, num_devices=8)
        message = str(caught.value)
        assert "['y'][0] is a scalar, int 0" in message
        assert "If ['y'] is a Python list of examples, pass np.asarray of it." in message

    def test_a_numpy_integer_is_a_device_count(self):
        assert split_batch(np.zeros((16, 3)), np.int64(8)).shape == (8, 2, 3)

    def test_empty_batch(self):
        with pytest.raises(ValueError, match="no arrays in it"):
            split_batch({}, num_devices=8)

    @pytest.mark.parametrize("num_devices", [0, -1, 1.5, True, np.int64(-1)])
    def test_bad_device_count(self, num_devices):
        with pytest.raises(
            ValueError,
            match=re.escape(f"num_devices must be a positive integer, got {num_devices!r}"),
        ):
            split_batch(np.zeros(8), num_devices=num_devices)


class TestShardBatch:
    mesh = jax.make_mesh((8,), ("data",))

    def test_even_batch_is_sharded_with_a_full_mask(self):
        data, mask = shard_batch({"x": np.ones((16, 3))}, self.mesh)
        assert data["x"].sharding.spec == jax.sharding.PartitionSpec("data")
        assert [shard.data.shape for shard in data["x"].addressable_shards] == [(2, 3)] * 8
        np.testing.assert_array_equal(np.asarray(mask), np.ones(16))

    def test_uneven_batch_raises_naming_sizes_and_policies(self):
        with pytest.raises(UnevenBatchError) as caught:
            shard_batch(np.zeros((19, 2)), self.mesh)
        message = str(caught.value)
        for part in [
            "19 examples",
            "8 devices of mesh axis 'data'",
            "(16 or 24)",
            "remainder='drop'",
            "remainder='pad'",
        ]:
            assert part in message

    def test_drop_leaves_out_the_remainder(self):
        data, mask = shard_batch(np.arange(19), self.mesh, remainder="drop")
        np.testing.assert_array_equal(np.asarray(data), np.arange(16))
        assert float(mask.sum()) == 16

    def test_drop_refuses_to_drop_everything(self):
        with pytest.raises(UnevenBatchError, match="would drop all 5 examples"):
            shard_batch(np.arange(5), self.mesh, remainder="drop")

    def test_pad_adds_zero_rows_masked_out(self):
        data, mask = shard_batch(
            {"x": np.ones((19, 2)), "y": np.arange(1, 20)}, self.mesh, remainder="pad"
        )
        assert data["x"].shape == (24, 2)
        np.testing.assert_array_equal(np.asarray(mask), [1.0] * 19 + [0.0] * 5)
        np.testing.assert_array_equal(np.asarray(data["y"])[19:], 0)
        assert mask.sharding == data["y"].sharding

    def test_masked_mean_equals_the_mean_of_the_real_examples(self):
        values = np.random.default_rng(0).normal(size=13).astype(np.float32)
        data, mask = shard_batch(values, self.mesh, remainder="pad")
        masked_mean = jax.jit(lambda v, m: (v * m).sum() / m.sum())(data, mask)
        np.testing.assert_allclose(float(masked_mean), values.mean(), rtol=1e-6)

    def test_unknown_axis(self):
        with pytest.raises(
            ValueError, match=r"the mesh has no axis 'batch'; its axes are \('data',\)"
        ):
            shard_batch(np.zeros(8), self.mesh, axis="batch")

    def test_unknown_policy(self):
        with pytest.raises(
            ValueError, match="remainder must be 'raise', 'drop' or 'pad', got 'trim'"
        ):
            shard_batch(np.zeros(8), self.mesh, remainder="trim")

    def test_pad_refuses_an_empty_batch_as_raise_and_drop_do(self):
        with pytest.raises(UnevenBatchError) as caught:
            shard_batch(np.zeros((0, 3)), self.mesh, remainder="pad")
        message = str(caught.value)
        assert "the batch has no examples (its leaves have 0 rows)" in message
        assert "8 rows of padding, whose masked mean is 0 / 0 = NaN" in message
        assert "Skip the empty batch" in message
        for remainder in ("raise", "drop"):
            with pytest.raises(UnevenBatchError):
                shard_batch(np.zeros((0, 3)), self.mesh, remainder=remainder)

    def test_a_leaf_of_strings_is_named(self):
        batch = {"x": np.zeros(8), "label": np.array(list("abcdefgh"))}
        with pytest.raises(TypeError) as caught:
            shard_batch(batch, self.mesh)
        message = str(caught.value)
        assert "shard_batch got ['label'] of dtype <U1" in message
        assert "JAX arrays hold only numbers and booleans" in message

    def test_two_dimensional_mesh_splits_along_the_named_axis_only(self):
        mesh = jax.make_mesh((4, 2), ("data", "model"))
        data, _ = shard_batch(np.zeros((8, 6)), mesh)
        assert {shard.data.shape for shard in data.addressable_shards} == {(2, 6)}


MESH = jax.make_mesh((8,), ("data",))


@pytest.mark.parametrize("function", [shard_batch, replicate])
@pytest.mark.parametrize(
    ("mesh", "shown", "fix"),
    [
        (None, "None", "build one with jax.make_mesh(shape, names)"),
        ((8,), "tuple (8,)", "for example jax.make_mesh((8,), ('data',))"),
        (
            NamedSharding(MESH, P("data")),
            "NamedSharding(mesh=Mesh('data': 8",
            "pass the sharding's mesh instead, sharding.mesh",
        ),
        (
            MESH.abstract_mesh,
            "AbstractMesh('data': 8",
            "an AbstractMesh has axis names and sizes but no devices",
        ),
    ],
)
def test_something_else_than_a_mesh_is_refused(function, mesh, shown, fix):
    with pytest.raises(TypeError) as caught:
        function(np.zeros(8), mesh)
    message = str(caught.value)
    assert f"{function.__name__} needs a jax.sharding.Mesh as mesh, got {shown}" in message
    assert fix in message


def test_replicate_takes_random_keys():
    tree = replicate({"key": jax.random.key(0), "w": np.zeros(2)}, MESH)
    assert jax.dtypes.issubdtype(tree["key"].dtype, jax.dtypes.prng_key)
    assert tree["key"].sharding.is_fully_replicated


def test_replicate_names_a_leaf_of_strings():
    with pytest.raises(TypeError, match=r"replicate got \['name'\] of dtype <U3"):
        replicate({"w": np.zeros(2), "name": "net"}, MESH)


def test_replicate_puts_a_full_copy_everywhere():
    mesh = jax.make_mesh((8,), ("data",))
    tree = replicate({"w": np.ones((3, 2)), "b": np.zeros(2)}, mesh)
    assert tree["w"].sharding.is_fully_replicated
    assert all(shard.data.shape == (3, 2) for shard in tree["w"].addressable_shards)


def test_replicate_takes_scalars_and_arrays_already_on_a_device():
    mesh = jax.make_mesh((8,), ("data",))
    tree = replicate({"step": 3, "w": jax.numpy.arange(4.0)}, mesh)
    assert tree["step"].shape == () and tree["step"].sharding.is_fully_replicated
    np.testing.assert_array_equal(tree["w"].addressable_shards[7].data, np.arange(4.0))


def launched(script, devices_per_process: int) -> subprocess.CompletedProcess:
    """Run ``script`` in 2 processes under the launcher, as a reader would."""
    return subprocess.run(
        [sys.executable, "-m", "jaxpar.launch", "--nproc", "2"]
        + ["--devices-per-process", str(devices_per_process), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )


class TestSeveralProcesses:
    """What changes with ``jax.process_count() > 1``, as far as one process can see it."""

    mesh = jax.make_mesh((8,), ("data",))

    @pytest.fixture
    def assembled(self, monkeypatch):
        """Pretend to be one of two processes, and record what reaches JAX."""
        calls = []
        make = jax.make_array_from_process_local_data

        def spy(sharding, local_data):
            calls.append(jax.tree.map(np.shape, local_data))
            return make(sharding, local_data)

        monkeypatch.setattr(jax, "process_count", lambda: 2)
        monkeypatch.setattr(jax, "make_array_from_process_local_data", spy)
        return calls

    def test_shard_batch_passes_this_process_share_to_jax(self, assembled):
        data, mask = shard_batch({"x": np.ones((19, 2))}, self.mesh, remainder="pad")
        assert assembled == [({"x": (24, 2)}, (24,))]
        assert data["x"].sharding.spec == jax.sharding.PartitionSpec("data")
        assert float(mask.sum()) == 19

    def test_uneven_share_names_this_process(self, assembled):
        with pytest.raises(
            UnevenBatchError, match="across 8 devices of mesh axis 'data' on this process"
        ):
            shard_batch(np.zeros(19), self.mesh)

    def test_replicate_passes_every_leaf_whole(self, assembled):
        replicate({"w": np.ones((3, 2)), "step": 0}, self.mesh)
        assert assembled == [[(), (3, 2)]]

    def test_a_mesh_without_this_process_devices_is_refused(self, monkeypatch):
        monkeypatch.setattr(jax, "process_index", lambda: 1)
        with pytest.raises(
            ValueError, match="none of the mesh's 8 devices belongs to process 1; build the mesh"
        ):
            shard_batch(np.zeros(8), self.mesh)

    def test_two_processes_each_pass_their_share(self, tmp_path):
        script = tmp_path / "job.py"
        script.write_text(
            "import jax\n"
            "from jaxpar import initialize_distributed\n"
            "initialize_distributed()\n"
            "import numpy as np\n"
            "from jax.experimental.multihost_utils import process_allgather\n"
            "from jaxpar import replicate, shard_batch\n"
            "from jax.sharding import NamedSharding, PartitionSpec as P\n"
            "mesh = jax.make_mesh((jax.device_count(),), ('data',))\n"
            "share = np.arange(5) + 10 * jax.process_index()  # 5 rows, 2 devices here\n"
            "data, mask = shard_batch(share, mesh, remainder='pad')\n"
            "whole = process_allgather((data, mask), tiled=True)\n"
            "w = replicate(np.full(2, 7.0), mesh)\n"
            "# Printed once every collective is done: Gloo logs each new connection to the same\n"
            "# standard output, and a line printed meanwhile could be cut by one.\n"
            "lines = []\n"
            "if jax.process_index() == 0:\n"
            "    lines.append(f'{data.shape} {whole[0].tolist()} {whole[1].tolist()}')\n"
            "    lines.append(f'{w.is_fully_replicated} {jax.device_get(w).tolist()}')\n"
            "# Values that differ between processes, as with torch.manual_seed(seed + rank):\n"
            "for bad in ({'b': np.zeros(2), 'w': np.full((3, 2), jax.process_index())},\n"
            "            {'b': np.zeros(2)} if jax.process_index() else {'b': np.zeros(3)},\n"
            "            {'b': np.zeros(2), 'c': 1} if jax.process_index() else {'b': np.zeros(2)},\n"
            "            {'w': data}):\n"
            "    try:\n"
            "        replicate(bad, mesh)\n"
            "    except ValueError as error:\n"
            "        lines.append(f'refused: {error}')\n"
            "try:  # jax.device_put checks the same (coming-from-pytorch.md says so)\n"
            "    jax.device_put(np.full(2, jax.process_index()), NamedSharding(mesh, P()))\n"
            "except AssertionError as error:\n"
            "    refused = 'not the same on each process' in str(error)\n"
            "    lines.append(f'device_put refused: {refused}')\n"
            "print('\\n'.join(lines), flush=True)\n",
            encoding="utf-8",
        )
        done = launched(script, devices_per_process=2)
        assert done.returncode == 0, done.stderr
        assert (
            "[rank 0] (12,) [0, 1, 2, 3, 4, 0, 10, 11, 12, 13, 14, 0] "
            "[1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]"
        ) in done.stdout
        assert "[rank 0] True [7.0, 7.0]" in done.stdout
        assert "[rank 0] device_put refused: True" in done.stdout
        # Differing values name the leaf, its type, the processes and the fix, on both ranks.
        for rank in (0, 1):
            refused = [
                line
                for line in done.stdout.splitlines()
                if line.startswith(f"[rank {rank}] refused:")
            ]
            assert len(refused) == 4, done.stdout
            values, shape, structure, spanning = refused
            assert (
                f"replicate got different values for ['w'] (int64[3, 2] on process {rank}) on "
                "different processes: "
                "processes [1] pass other values than process 0."
            ) in values
            assert "multihost_utils.broadcast_one_to_all(tree)" in values
            assert f"different values for ['b'] (float64[{3 - rank}] on process {rank})" in shape
            assert "trees of different structures: processes [1]" in structure
            assert "global array at ['w']" in spanning and "out_shardings=" in spanning

    def test_shares_of_different_sizes_are_refused_on_every_process(self, tmp_path):
        script = tmp_path / "job.py"
        script.write_text(
            "import jax\n"
            "from jaxpar import initialize_distributed\n"
            "initialize_distributed()\n"
            "import numpy as np\n"
            "from jaxpar import UnevenBatchError, shard_batch\n"
            "mesh = jax.make_mesh((jax.device_count(),), ('data',))\n"
            "rank = jax.process_index()\n"
            "lines = []\n"
            "# The rows of process 0 and of process 1, and the policy for a remainder.\n"
            "for rows, remainder in [((8, 16), 'raise'), ((6, 3), 'pad'), ((6, 7), 'pad')]:\n"
            "    try:\n"
            "        data, _ = shard_batch(np.ones((rows[rank], 3)), mesh, remainder=remainder)\n"
            "        lines.append(f'accepted: {data.shape}')\n"
            "    except UnevenBatchError as error:\n"
            "        lines.append(f'refused: {error}')\n"
            "print('\\n'.join(lines), flush=True)\n",
            encoding="utf-8",
        )
        done = launched(script, devices_per_process=4)
        assert done.returncode == 0, done.stdout + done.stderr
        for rank in (0, 1):
            lines = [
                line.removeprefix(f"[rank {rank}] ")
                for line in done.stdout.splitlines()
                if line.startswith(f"[rank {rank}] refused:")
                or line.startswith(f"[rank {rank}] accepted:")
            ]
            assert len(lines) == 3, done.stdout
            uneven, padded, accepted = lines
            assert uneven.startswith(
                "refused: shard_batch got shares of different sizes: process 0 passes 8 rows, "
                "process 1 passes 16 rows, each for 4 devices of mesh axis 'data'. Every process "
                "must pass a share of the same size"
            ), uneven
            assert "the global batch size divided by jax.process_count()" in uneven
            assert (
                "process 0 passes 6 rows (8 after remainder='pad'), process 1 passes 3 rows "
                "(4 after remainder='pad'), each for 4 devices"
            ) in padded
            # Shares that pad to the same size are fine: the mask tells the real rows.
            assert accepted == "accepted: (16, 3)"


def test_initialize_distributed_after_jax_devices_says_it_came_too_late():
    """JAX refuses jax.distributed.initialize() once its devices exist: the message must
    name that order, not blame a missing launcher; a bad option keeps JAX's own error."""
    code = (
        "import jax\n"
        "from jaxpar import initialize_distributed\n"
        "for options in ({'coordinator_address': '127.0.0.1:1', 'num_processes': 2,\n"
        "                 'process_id': 5}, {}):\n"
        "    try:\n"
        "        initialize_distributed(**options)\n"
        "    except Exception as error:\n"
        "        print(type(error).__name__, error)\n"
        "jax.devices()\n"
        "initialize_distributed()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPAR_")}
    env |= {"PYTHONPATH": str(SRC), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    bad_option, not_launched = done.stdout.splitlines()
    assert bad_option.startswith("ValueError process_id and num_processes must be nonnegative")
    assert not_launched.startswith("NotLaunchedError this process has no settings")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "RuntimeError: initialize_distributed() came too late: JAX has already initialised "
        "its devices in this process (something called jax.devices(), created an array or "
        "ran a computation first)"
    ), done.stderr
    assert "Call initialize_distributed() first, right after `import jax`" in last
    assert "NotLaunchedError" not in done.stderr


def test_initialize_distributed_too_late_under_the_launcher_says_so(monkeypatch):
    monkeypatch.setenv("JAXPAR_COORDINATOR", "127.0.0.1:1")
    jax.devices()
    with pytest.raises(RuntimeError, match="initialize_distributed\\(\\) came too late"):
        initialize_distributed()


def test_every_public_name_loads_and_the_launcher_needs_no_jax():
    import jaxpar

    assert sorted(jaxpar.__all__) == sorted(jaxpar._MODULE_OF)
    for name in jaxpar.__all__:
        assert getattr(jaxpar, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        jaxpar.nothing  # noqa: B018
    script = "import sys, jaxpar.launch; print('jax' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
