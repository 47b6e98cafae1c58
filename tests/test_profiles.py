"""Tests of jaxpar.profiles: reading traces, summing operations, drawing timelines."""

from __future__ import annotations

import gzip
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpar import (
    Operation,
    Trace,
    find_trace_file,
    operation_scopes,
    read_trace,
    timeline_svg,
    top_operations,
)
from jaxpar.profiles import COLLECTIVE


def op(name, device=0, start=0.0, duration=1.0, run="1", module="jit_step", **extra):
    args = {"hlo_op": name, "hlo_module": module, "run_id": run}
    if device is not None:
        args["device_ordinal"] = str(device)
    args.update(extra)
    return {"ph": "X", "pid": 1, "tid": 2, "ts": start, "dur": duration, "name": name, "args": args}


def write_trace(folder: Path, events, name="perfetto_trace.json.gz", run="2026_01_01_00_00_00"):
    """A trace file where jax.profiler.trace would write it."""
    path = folder / "plugins" / "profile" / run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        json.dump({"displayTimeUnit": "ns", "traceEvents": events}, stream)
    return path


class TestFindTraceFile:
    def test_a_folder_without_a_trace_says_how_to_record_one(self, tmp_path):
        (tmp_path / "plugins" / "profile").mkdir(parents=True)
        with pytest.raises(FileNotFoundError, match=r"no trace in .*jax\.profiler\.trace"):
            find_trace_file(tmp_path)

    def test_a_missing_folder(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            find_trace_file(tmp_path / "nowhere")

    @pytest.mark.parametrize("function", [find_trace_file, read_trace])
    def test_a_folder_that_is_not_a_path(self, function):
        with pytest.raises(TypeError) as caught:
            function(None)
        message = str(caught.value)
        assert f"{function.__name__} needs the folder given to jax.profiler.trace" in message
        assert "as a str or a pathlib.Path; got None." in message

    def test_a_file_is_returned_as_it_is(self, tmp_path):
        path = write_trace(tmp_path, [op("fusion")], name="host.trace.json.gz")
        assert find_trace_file(path) == path

    def test_the_newest_run_and_its_perfetto_file(self, tmp_path):
        old = write_trace(tmp_path, [op("old")], run="2026_01_01_00_00_00")
        new_xprof = write_trace(tmp_path, [op("new")], name="h.trace.json.gz", run="2026_01_02")
        new_perfetto = write_trace(tmp_path, [op("new")], run="2026_01_02")
        os.utime(old, (1, 1))
        os.utime(new_xprof, (2, 2))
        os.utime(new_perfetto, (2, 2))
        assert find_trace_file(tmp_path) == new_perfetto

    def test_without_a_perfetto_file_the_xprof_json(self, tmp_path):
        path = write_trace(tmp_path, [op("fusion")], name="host.trace.json.gz")
        assert find_trace_file(tmp_path) == path


class TestReadTrace:
    def test_operations_devices_runs_and_steps(self, tmp_path):
        events = [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
            op("all-reduce.3", device=1, start=20.0, duration=5.0, run="7"),
            op("fusion.1", device=0, start=10.0, duration=3.0, run="7"),
            op("fusion.1", device=1, start=12.0, duration=4.0, run="7"),
            op("fusion.1", device=0, start=40.0, duration=3.0, run="8"),
            {"ph": "X", "pid": 1, "tid": 3, "ts": 9.0, "dur": 50.0, "name": "train",
             "args": {"step_num": "0"}},
            {"ph": "X", "pid": 1, "tid": 3, "ts": 5.0, "dur": 1.0, "name": "$python frame"},
        ]  # fmt: skip
        trace = read_trace(write_trace(tmp_path, events).parent.parent.parent.parent)
        assert [o.name for o in trace.operations] == [
            "fusion.1",
            "fusion.1",
            "all-reduce.3",
            "fusion.1",
        ]
        assert trace.devices == (0, 1)
        assert trace.runs == ("7", "8")
        assert trace.span_us == pytest.approx(33.0)  # 10 to 43
        assert trace.busy_us == pytest.approx(15.0)
        assert [(s.name, s.number) for s in trace.steps] == [("train", 0)]
        assert [o.collective for o in trace.operations] == [False, False, True, False]

    def test_a_device_named_by_its_process_as_on_gpu(self, tmp_path):
        events = [
            {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/device:GPU:1"}},
            {**op("fusion.2", device=None), "pid": 9},
            op("fusion.3", device=None),  # pid 1 has no device: not a device operation
        ]
        trace = read_trace(write_trace(tmp_path, events))
        assert [(o.name, o.device) for o in trace.operations] == [("fusion.2", 1)]

    def test_a_plain_json_file(self, tmp_path):
        path = tmp_path / "trace.json"
        path.write_text(json.dumps([op("fusion.1")]), encoding="utf-8")
        assert read_trace(path).operations[0].name == "fusion.1"

    def test_a_trace_without_device_operations(self, tmp_path):
        events = [{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.0, "name": "$f"}]
        with pytest.raises(ValueError, match="holds no operation that ran on a device"):
            read_trace(write_trace(tmp_path, events))

    def test_a_recorded_trace_of_a_run_with_no_device_operations(self, tmp_path):
        f = jax.jit(lambda x: x + 1)
        jax.block_until_ready(f(jnp.ones(4)))  # runs before the trace, not in it
        with jax.profiler.trace(tmp_path, create_perfetto_trace=True):
            pass
        with pytest.raises(ValueError, match=r"block_until_ready"):
            read_trace(tmp_path)

    @pytest.mark.parametrize("content", [b"not json", b'{"events": []}', b'{"traceEvents": 3}'])
    def test_a_file_that_is_not_a_trace(self, tmp_path, content):
        path = tmp_path / "x.trace.json.gz"
        path.write_bytes(gzip.compress(content))
        with pytest.raises(ValueError, match="is not a trace in the Chrome trace format"):
            read_trace(path)


def ops(*specs):
    return [Operation(name, device, "jit_step", start, duration, "1") for name, device, start, duration in specs]  # fmt: skip


class TestTopOperations:
    OPS = ops(
        ("b", 0, 0.0, 2.0),
        ("a", 0, 2.0, 2.0),
        ("all-reduce-start.1", 0, 4.0, 6.0),
        ("a", 1, 0.0, 10.0),
    )

    def test_per_device_longest_first_ties_by_name(self):
        top = top_operations(self.OPS, device=0)
        assert [(t.name, t.count, t.total_us, t.collective) for t in top] == [
            ("all-reduce-start.1", 1, 6.0, True),
            ("a", 1, 2.0, False),
            ("b", 1, 2.0, False),
        ]
        assert sum(t.share for t in top) == pytest.approx(1.0)

    def test_over_all_devices_and_a_limit(self):
        top = top_operations(Trace(Path("t"), tuple(self.OPS), ()), 1)
        assert [(t.name, t.count, t.total_us) for t in top] == [("a", 2, 12.0)]
        assert top[0].share == pytest.approx(12.0 / 20.0)
        assert len(top_operations(self.OPS, None)) == 3

    @pytest.mark.parametrize("n", [0, -1, 1.5, True, "3"])
    def test_a_bad_limit(self, n):
        with pytest.raises(ValueError, match="n must be a whole number"):
            top_operations(self.OPS, n)

    def test_a_device_that_ran_nothing(self):
        with pytest.raises(ValueError, match=r"device 5 ran no operation .*\[0, 1\]"):
            top_operations(self.OPS, device=5)

    def test_a_numpy_integer_limit(self):
        assert len(top_operations(self.OPS, np.int64(2))) == 2


@pytest.mark.parametrize("function", [top_operations, timeline_svg])
@pytest.mark.parametrize(
    ("value", "got"),
    [
        (None, "got None."),
        ([1, 2], "got a list that holds int 1."),
        ("trace", "got the path 'trace'; read the trace first: {function}(read_trace(path))."),
    ],
)
def test_operations_that_are_not_operations(function, value, got):
    with pytest.raises(TypeError) as caught:
        function(value)
    message = str(caught.value)
    assert f"{function.__name__} needs a Trace, such as read_trace(folder) returns" in message
    assert message.endswith(got.format(function=function.__name__)), message


@pytest.mark.parametrize(
    ("name", "collective"),
    [
        ("all-reduce.3", True),
        ("all-reduce", True),
        ("all-gather-start.12", True),
        ("reduce-scatter-done", True),
        ("collective-permute.1", True),
        ("all-to-all", True),
        ("wrapped_reduce.1", False),
        ("all-reduce-fusion", False),
        ("ynn_fusion.2", False),
    ],
)
def test_collective_names(name, collective):
    assert (COLLECTIVE.match(name) is not None) == collective


class TestOperationScopes:
    TEXT = """ENTRY %main (p: f32[4]) -> f32[4] {
  %param = f32[4]{0} parameter(0), metadata={op_name="x"}
  ROOT %multiply.1 = f32[4]{0} multiply(%param, %param), metadata={op_name="jit(f)/scale/mul" stack_frame_id=1}
  %constant = f32[] constant(2)
}"""

    def test_from_text(self):
        assert operation_scopes(self.TEXT) == {"param": "x", "multiply.1": "jit(f)/scale/mul"}

    def test_not_a_program(self):
        with pytest.raises(TypeError, match="needs a compiled program"):
            operation_scopes(42)


class TestTimelineSvg:
    def test_rows_bars_and_accessible_title(self):
        svg = timeline_svg(
            ops(("ynn_fusion.1", 2, 10.0, 5.0), ("all-reduce.1", 2, 15.0, 5.0), ("x", 0, 0.0, 1.0))
        )
        root = ET.fromstring(svg)
        ns = "{http://www.w3.org/2000/svg}"
        assert root.get("role") == "img"
        assert "3 operations on 2 devices" in root.find(f"{ns}title").text
        bars = root.findall(f"{ns}rect[@class]")
        assert [b.get("class") for b in bars] == ["other", "matmul", "collective"]
        labels = [t.text for t in root.findall(f"{ns}text")]
        assert "device 0" in labels and "device 2" in labels
        assert all(float(b.get("width")) > 0 for b in bars)

    def test_no_operations(self):
        with pytest.raises(ValueError, match="no operations to draw"):
            timeline_svg([])

    def test_numpy_integer_sizes(self):
        svg = timeline_svg(ops(("a", 0, 0.0, 1.0)), width=np.int64(300), row_height=np.int32(10))
        assert 'width="300"' in svg

    @pytest.mark.parametrize(("option", "value"), [("width", 100), ("row_height", 2)])
    def test_too_small(self, option, value):
        with pytest.raises(ValueError, match=option):
            timeline_svg(ops(("a", 0, 0.0, 1.0)), **{option: value})
