"""The "Seeing what runs" page's claims, read from its recorded outputs and its drawing.

``snippets/seeing_what_runs/profile_timeline.svg`` is the ``timeline.svg`` that
``profile.py`` draws from its trace, recorded once like an output (times change from run
to run, so the snippet test cannot compare it). After re-recording ``profile.out``,
redraw it with::

    TRACE_FOLDER=/tmp/trace PYTHONPATH=tools .venv/bin/python snippets/seeing_what_runs/profile.py
    cp /tmp/trace/timeline.svg snippets/seeing_what_runs/profile_timeline.svg
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict

from sitetools import REPO
from sitetools.snippets import read_sections

FOLDER = REPO / "snippets/seeing_what_runs"
PROFILE, COMPILING, MEMORY = (
    read_sections((FOLDER / f"{name}.out").read_text(encoding="utf-8"))
    for name in ("profile", "compiling", "memory")
)
SVG = "{http://www.w3.org/2000/svg}"


# A profile


def test_the_trace_files_and_what_they_hold():
    assert PROFILE["trace"] == (
        "written: perfetto_trace.json.gz, HOST.trace.json.gz, HOST.xplane.pb\n"
    )
    assert PROFILE["read"].splitlines() == [
        "read: perfetto_trace.json.gz",
        "devices: 8, program runs: 4",
        "steps annotated: [0, 1, 2, 3]",
        "operations per device per step: [26]; the same on every device: True",
    ]


def test_one_all_reduce_per_step_sums_both_gradients_and_the_loss():
    lines = PROFILE["collectives"].splitlines()
    assert lines[0] == "collectives per device per step (XLA:CPU): all-reduce.3"
    sources = lines[1].split("sums: ")[1].split(", ")
    assert sources == [
        "transpose(jvp(hidden))/dot_general",
        "transpose(jvp(out))/dot_general",
        "jvp(loss)/reduce_sum",
    ]


def test_named_scopes_reach_the_operations_forward_and_backward():
    lines = PROFILE["scopes"].splitlines()
    counts = dict(re.findall(r"(\w+) (\d+(?: \+ \d+)?)", lines[0].split(": ", 1)[1]))
    assert counts == {"hidden": "2 + 2", "out": "1 + 2", "loss": "7 + 6", "optimizer": "4"}
    products = dict(line.split() for line in lines[2:])
    assert products["ynn_fusion.2"] == "jvp(hidden)/dot_general"
    assert products["dot.3"] == "transpose(jvp(hidden))/dot_general"


def test_summed_operation_time_exceeds_the_span_and_the_drawing_has_every_operation():
    assert PROFILE["top"].rstrip().endswith("the first operation to the last: True")
    assert PROFILE["timeline"] == f"timeline.svg: {26 * 8} bars in 8 rows\n"


def bars_of_the_drawing():
    root = ET.parse(FOLDER / "profile_timeline.svg").getroot()
    bars = []
    for rect in root.findall(f"{SVG}rect[@class]"):
        name, device, ms = re.fullmatch(
            r"(\S+) on device (\d+): ([\d.]+) ms", rect.find(f"{SVG}title").text
        ).groups()
        bars.append((rect.get("class"), name, int(device), float(ms)))
    return root, bars


def test_the_drawing_is_one_step_of_this_trace():
    root, bars = bars_of_the_drawing()
    assert root.get("role") == "img"
    assert "208 operations on 8 devices" in root.find(f"{SVG}title").text
    assert len(bars) == 26 * 8 and {device for _, _, device, _ in bars} == set(range(8))
    assert {name for kind, name, _, _ in bars if kind == "collective"} == {"all-reduce.3"}
    products = {line.split()[0] for line in PROFILE["scopes"].splitlines()[2:]}
    assert {name for kind, name, _, _ in bars if kind == "matmul"} <= products


def test_in_the_drawn_step_devices_start_apart_and_the_all_reduce_takes_most_time():
    root, bars = bars_of_the_drawing()
    time = defaultdict(float)
    for kind, _, _, ms in bars:
        time[kind] += ms
    assert time["collective"] > time["matmul"] + time["other"]
    first = {}  # the x of each device's first bar
    for rect in root.findall(f"{SVG}rect[@class]"):
        device = int(re.search(r"on device (\d+)", rect.find(f"{SVG}title").text)[1])
        first.setdefault(device, float(rect.get("x")))
    width = float(root.get("width"))
    assert max(first.values()) - min(first.values()) > 0.05 * width
    # No device leaves the all-reduce before the last one has entered it.
    spans = [
        (float(r.get("x")), float(r.get("x")) + float(r.get("width")))
        for r in root.findall(f"{SVG}rect[@class='collective']")
    ]
    assert min(end for _, end in spans) >= max(start for start, _ in spans)


# Compile time


def test_each_cause_compiles_once_and_says_why():
    text = COMPILING["recompiles"]
    status = re.findall(r"^(\d) .*: (compiled|cached)$", text, re.MULTILINE)
    assert status == [("1", "compiled"), ("2", "cached")] + [
        (str(i), "compiled") for i in range(3, 8)
    ]
    calls = re.split(r"^\d ", text, flags=re.MULTILINE)[1:]
    assert "cache miss explanation unavailable" in calls[2]  # a static argument
    assert "now f32[192@data,64] and before f32[256@data,64]" in calls[3]  # a shape
    assert "now i32[256]({Explicit" in calls[4] and "before i32[256@data]" in calls[4]  # sharding
    assert "now bf16[256@data,64] and before f32[256@data,64]" in calls[5]  # a dtype
    assert "symmetric difference of key sets: {'weights'}" in calls[6]  # a pytree
    assert text.rstrip().endswith("train_step compiled 6 times in 7 calls")


def test_a_traced_learning_rate_compiles_once():
    assert COMPILING["fix"] == (
        "train_step_lr with 3 learning rates: compiled 1 time\n"
        "then an np.float32 learning rate: compiled 1 time\n"  # weak type -> strong type
    )


def test_the_second_process_reads_what_the_first_wrote():
    assert COMPILING["persistent"].splitlines() == [
        "process 1: cache hits 0, misses 1; cache folder: ['jit_train_step-<key>-cache']",
        "process 2: cache hits 1, misses 0; cache folder: ['jit_train_step-<key>-cache']",
        "the second process compiled faster: True",
    ]


# Memory


def memory_of(layout):
    block = MEMORY["memory"].split(f"{layout}, bytes per device (XLA:CPU):\n")[1]
    values = dict(re.findall(r"^  (\w+) +(\d+)", block, re.MULTILINE)[:5])
    parts = re.search(r"parameters (\d+) \+ optimizer state (\d+) \+ batch (\d+): (\w+)", block)
    return {k: int(v) for k, v in values.items()}, [int(p) for p in parts.groups()[:3]], parts[4]


def test_the_arguments_are_the_shards_of_the_fsdp_page():
    fsdp_page = (REPO / "snippets/model_sharding/fsdp_and_tp.out").read_text(encoding="utf-8")
    created = dict(re.findall(r"(\w+): created with (\d+) of 38440 bytes on device 0", fsdp_page))
    for layout in ("replicated", "FSDP"):
        memory, (params, state, batch), equal = memory_of(layout)
        assert equal == "True" and memory["arguments"] == params + state + batch
        assert params == state == int(created[layout])  # the momentum mirrors the parameters
        assert memory["aliased"] == params + state  # donated, and written over
        assert 0 < memory["outputs"] - memory["aliased"] < 100  # the loss, and little else
    assert memory_of("replicated")[1][0] == 38440 and memory_of("FSDP")[1][0] == 4840


def test_on_xla_cpu_fsdp_temporaries_are_no_smaller_and_peak_leaves_them_out():
    replicated, fsdp = memory_of("replicated")[0], memory_of("FSDP")[0]
    assert fsdp["temporaries"] >= replicated["temporaries"]
    for memory in (replicated, fsdp):
        assert 0 <= memory["peak"] - memory["arguments"] < 100
        assert memory["peak"] < memory["arguments"] + memory["temporaries"]


def test_both_layouts_do_nearly_the_same_flops():
    flops = {
        layout: int(n.replace(",", ""))
        for layout, n in re.findall(r"(\w+): ([\d,]+) FLOPs", MEMORY["cost"])
    }
    assert flops["FSDP"] < flops["replicated"] < flops["FSDP"] * 1.05


def test_live_arrays_match_the_plan_and_donation_keeps_them():
    fsdp_arguments = memory_of("FSDP")[0]["arguments"]
    assert MEMORY["live"].splitlines() == [
        "memory_stats() on cpu -> None",
        f"FSDP: device 0 holds {fsdp_arguments} bytes of parameters, optimizer state and batch",
        f"after one step: {fsdp_arguments} bytes, and the loss",
        "TypeError: Argument types differ from the types for which this computation was compiled",
    ]
    assert MEMORY["aot"].count("compiled ahead of time, before any array exists") == 2
