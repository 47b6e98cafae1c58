"""Tests of jaxpar.meshes: meshes and partition specs, checked, with errors that name the fix."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import check_spec, make_mesh, named_sharding


def assert_parts(error: pytest.ExceptionInfo[BaseException], *parts: str) -> None:
    message = str(error.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("x", "y"))


class TestMakeMesh:
    def test_builds_an_explicit_mesh_by_default(self):
        mesh = make_mesh((2, 4), ("x", "y"))
        assert dict(mesh.shape) == {"x": 2, "y": 4}
        assert mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)
        assert mesh == jax.make_mesh((2, 4), ("x", "y"))

    def test_axis_types_pass_through(self):
        mesh = make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
        assert mesh.axis_types == (AxisType.Auto,)

    def test_a_single_axis_type_applies_to_every_axis(self):
        mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
        assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)

    def test_devices_pass_through(self):
        devices = jax.devices()[::-1]
        mesh = make_mesh((2, 4), ("x", "y"), devices=devices)
        assert [d.id for d in mesh.devices.flat] == [d.id for d in devices]

    def test_a_subset_of_devices(self):
        mesh = make_mesh((2, 2), ("x", "y"), devices=jax.devices()[4:])
        assert sorted(d.id for d in mesh.devices.flat) == [4, 5, 6, 7]

    def test_too_many_devices_asked_names_shape_product_count_and_remedies(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((3, 4), ("x", "y"))
        assert_parts(
            caught,
            "a mesh of shape (3, 4) needs 3 x 4 = 12 devices, but 8 are available",
            "sizes multiply to 8, such as (8,), (2, 4) or (4, 2)",
            "jaxpar.simulate_cpu_devices(12) right after `import jax`",
        )

    def test_too_few_devices_asked_suggests_a_subset(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((4,), ("data",))
        assert_parts(
            caught,
            "a mesh of shape (4,) needs 4 devices, but 8 are available",
            "such as (8,), (2, 4) or (4, 2)",
            "devices=jax.devices()[:4]",
        )

    def test_wrong_count_of_given_devices(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((2, 4), ("x", "y"), devices=jax.devices()[:7])
        assert_parts(
            caught, "needs 2 x 4 = 8 devices, but devices= holds 7", "such as (7,),", "pass 8"
        )

    def test_lists_several_shapes_for_larger_counts(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((5,), ("x",), devices=jax.devices()[:6])
        assert_parts(caught, "multiply to 6, such as (6,), (2, 3) or (3, 2)")

    def test_sizes_and_names_differ_in_length(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((2, 4), ("x",))
        assert_parts(
            caught, "shape (2, 4) has 2 sizes but names ('x',) has 1 name", "one name per mesh axis"
        )

    @pytest.mark.parametrize("size", [0, -2, 2.0, True, "2"])
    def test_sizes_must_be_positive_integers(self, size):
        with pytest.raises(ValueError) as caught:
            make_mesh((4, size), ("x", "y"))
        assert_parts(caught, "positive integer", f"(4, {size!r})", f"{size!r} at position 1")

    def test_shape_must_be_a_tuple(self):
        with pytest.raises(ValueError) as caught:
            make_mesh(8, ("x",))
        assert_parts(caught, "tuple of mesh axis sizes", "got 8")

    def test_names_as_a_bare_string(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((8,), "data")
        assert_parts(caught, "('data',)", "Mind the comma")

    @pytest.mark.parametrize("name", [1, None, ""])
    def test_names_must_be_strings(self, name):
        with pytest.raises(ValueError) as caught:
            make_mesh((2, 4), ("x", name))
        assert_parts(caught, "non-empty string", f"{name!r} at position 1")

    def test_names_must_be_unique(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((2, 4), ("x", "x"))
        assert_parts(caught, "unique", "('x', 'x') repeats 'x'")

    def test_axis_types_one_per_axis(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,))
        assert_parts(caught, "one jax.sharding.AxisType per mesh axis ('x', 'y')", "(Auto,)")

    def test_axis_types_as_a_string_is_shown_as_passed(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((8,), ("d",), axis_types="auto")
        assert_parts(
            caught,
            "one jax.sharding.AxisType per mesh axis ('d',), got 'auto'.",
            "axis_types=AxisType.Auto for every axis",
            "from jax.sharding import AxisType",
        )

    def test_numpy_integer_sizes(self):
        mesh = make_mesh((np.int64(2), np.int32(4)), ("x", "y"))
        assert mesh.shape == {"x": 2, "y": 4}
        assert all(type(size) is int for size in mesh.shape.values())

    def test_no_devices(self):
        with pytest.raises(ValueError) as caught:
            make_mesh((8,), ("d",), devices=[])
        assert_parts(
            caught,
            "a mesh of shape (8,) needs 8 devices, but devices=[] holds none",
            "for example devices=jax.devices()",
        )
        assert "(0,)" not in str(caught.value)

    def test_a_device_twice(self):
        d0 = jax.devices()[0]
        with pytest.raises(ValueError) as caught:
            make_mesh((2,), ("d",), devices=[d0, d0])
        assert_parts(
            caught,
            f"devices holds {d0!r} twice, at positions 0 and 1",
            "Pass 2 distinct devices, for example devices=jax.devices()[:2]",
        )

    def test_the_devices_function_not_called(self):
        with pytest.raises(TypeError) as caught:
            make_mesh((8,), ("d",), devices=jax.devices)
        assert_parts(
            caught, "got the function devices itself; call it, as in devices=jax.devices()."
        )

    @pytest.mark.parametrize(
        ("devices", "shown"), [(3, "got int 3"), ("cpu", "it holds str 'c' at position 0")]
    )
    def test_devices_that_are_not_devices(self, devices, shown):
        with pytest.raises(TypeError) as caught:
            make_mesh((8,), ("d",), devices=devices)
        assert_parts(caught, "devices must be a sequence of", shown)


class TestCheckSpec:
    @pytest.mark.parametrize(
        ("spec", "shape"),
        [
            (P(), (8, 4)),
            (P(), ()),
            (P("x"), (8, 4)),
            (P("x", "y"), (8, 4)),
            (P("y", "x"), (8, 4)),
            (P(("x", "y")), (16,)),
            (P(None, ("y", "x")), (3, 8)),
            (P(None, "y", None), (5, 4, 7)),
            (P(P.UNCONSTRAINED, "y"), (3, 4)),
            (P("x"), (0, 3)),
        ],
    )
    def test_valid_specs_pass(self, mesh, spec, shape):
        check_spec(mesh, spec, shape)

    def test_unknown_axis_names_it_and_the_mesh_axes(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("data"), (8,))
        assert_parts(caught, "names mesh axis 'data'", "the mesh's axes are ('x', 'y')")

    def test_unknown_axis_inside_a_tuple(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P(("x", "z")), (8,))
        assert_parts(caught, "mesh axis 'z'", "('x', 'y')", "an axis called 'z'")

    def test_more_entries_than_dimensions(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("x", None, "y"), (8, 4))
        assert_parts(caught, "P('x', None, 'y') has 3 entries", "2 dimensions (shape (8, 4))")

    def test_entries_for_a_scalar(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("x"), ())
        assert_parts(caught, "has 1 entry but the array has 0 dimensions (shape ())")

    def test_axis_used_in_two_dimensions(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("x", "x"), (8, 4))
        assert_parts(caught, "mesh axis 'x' twice (in dimensions 0 and 1)", "None")

    def test_axis_used_twice_in_one_dimension(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P(("y", "y")), (16,))
        assert_parts(caught, "mesh axis 'y' twice (in dimension 0)")

    def test_indivisible_dimension_names_size_axis_and_remedies(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P(None, "y"), (8, 6))
        assert_parts(
            caught,
            "dimension 1 of shape (8, 6) has size 6",
            "mesh axis 'y' of size 4",
            "Pad dimension 1 to 8 (a multiple of 4)",
            "shard it over mesh axis 'x' (size 2) instead",
            "unsharded with None in position 1",
        )

    def test_indivisible_over_several_axes(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P(("x", "y")), (12,))
        assert_parts(
            caught,
            "dimension 0 of shape (12,) has size 12",
            "mesh axes ('x', 'y') of total size 2 x 4 = 8",
            "Pad dimension 0 to 16 (a multiple of 8)",
            "mesh axis 'x' (size 2) or mesh axis 'y' (size 4)",
        )

    def test_no_other_axis_fits(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("x", "y"), (3, 4))
        assert_parts(
            caught,
            "dimension 0 of shape (3, 4) has size 3",
            "Pad dimension 0 to 4 (a multiple of 2)",
            "another mesh axis whose size divides 3",
        )

    def test_bad_entry(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("x", 1), (8, 4))
        assert_parts(caught, "entry 1 of P('x', 1) is 1", "None, a mesh axis name")

    def test_spec_must_be_a_partition_spec(self, mesh):
        with pytest.raises(TypeError) as caught:
            check_spec(mesh, ("x", None), (8, 4))
        assert_parts(caught, "PartitionSpec, got tuple ('x', None)", "P('x', None)")

    def test_numpy_integer_sizes(self, mesh):
        check_spec(mesh, P("x", "y"), (np.int64(8), np.int64(4)))
        with pytest.raises(ValueError, match=r"shape \(8, 6\) has size 6"):
            check_spec(mesh, P(None, "y"), (np.int64(8), np.int64(6)))

    def test_an_abstract_mesh_is_enough(self, mesh):
        check_spec(mesh.abstract_mesh, P("x", "y"), (8, 4))
        assert named_sharding(mesh.abstract_mesh, P("x")).spec == P("x")

    @pytest.mark.parametrize(("value", "shown"), [(None, "None"), ((2, 4), "tuple (2, 4)")])
    @pytest.mark.parametrize("function", [check_spec, named_sharding])
    def test_the_mesh_must_be_a_mesh(self, function, value, shown):
        with pytest.raises(TypeError) as caught:
            function(value, P("x"), (8,))
        assert_parts(
            caught,
            f"{function.__name__} needs a jax.sharding.Mesh as mesh, got {shown}",
            "jax.make_mesh((8,), ('data',))",
        )

    def test_bad_shape(self, mesh):
        with pytest.raises(ValueError) as caught:
            check_spec(mesh, P("x"), 8)
        assert_parts(caught, "the array's shape", "got 8")


class TestNamedSharding:
    def test_same_as_named_sharding(self, mesh):
        sharding = named_sharding(mesh, P("x", "y"), (8, 4))
        assert sharding == NamedSharding(mesh, P("x", "y"))

    def test_checks_the_shape_when_given(self, mesh):
        with pytest.raises(ValueError, match="dimension 0 of shape"):
            named_sharding(mesh, P("y"), (6,))

    def test_without_shape_checks_axes(self, mesh):
        assert named_sharding(mesh, P("y")) == NamedSharding(mesh, P("y"))
        with pytest.raises(ValueError, match="names mesh axis 'z'"):
            named_sharding(mesh, P("z"))
        with pytest.raises(ValueError, match="twice"):
            named_sharding(mesh, P("x", "x"))
