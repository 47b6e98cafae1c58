"""The claims of "Compiling for GPUs and TPUs you don't have", and of the pages that quote
its output, read from other_hardware.out (which the snippet test compiles again for
XLA:CPU, XLA:GPU and XLA:TPU and compares)."""

from __future__ import annotations

import re

from sitetools import REPO
from sitetools.snippets import read_sections

OUT = read_sections((REPO / "snippets/seeing_what_runs/other_hardware.out").read_text("utf-8"))
TARGETS = ("cpu", "h100-8", "v5e-8")


def layouts() -> dict[tuple[str, str], list[tuple[int, str, str, int, str, bool]]]:
    """(layout, target) -> [(count, kind, element type, group, axes, asynchronous)]."""
    found: dict = {}
    layout = target = None
    for line in OUT["layouts"].splitlines():
        if not line.startswith(" "):
            layout = line.rstrip(":")
            continue
        head = line[:10].strip()
        target = head or target
        count, kind, dtype, _, _, _, group, axes, *rest = line[10:].split()
        found.setdefault((layout, target), []).append(
            (int(count), kind, dtype, int(group), axes.strip("()"), rest == ["async"])
        )
    return found


def memory() -> dict[tuple[str, str], list[float]]:
    rows = {}
    for line in OUT["memory"].splitlines()[1:]:
        *name, target, arguments, outputs, aliased, temporaries, peak = line.split()
        rows[" ".join(name), target] = [
            float(v) for v in (arguments, outputs, aliased, temporaries, peak)
        ]
    return rows


def test_xla_cpu_widens_every_collective_and_gpu_and_tpu_keep_bfloat16_gradients():
    for (layout, target), collectives in layouts().items():
        types = {dtype for _, kind, dtype, *_ in collectives}
        if target == "cpu":
            assert types == {"f32"}, layout
        else:
            assert "bf16" in types, (layout, target)
            # float32 only for the loss's all-reduce, which the step computes in float32
            assert [c for c in collectives if c[2] == "f32"] == [
                c for c in collectives if c[1] == "all-reduce" and c[2] == "f32"
            ]


def test_gradient_sums_of_fsdp_become_reduce_scatters_off_cpu():
    found = layouts()
    for layout in ("FSDP", "FSDP x tensor"):
        assert not any(c[1] == "reduce-scatter" for c in found[layout, "cpu"])
        for target in ("h100-8", "v5e-8"):
            assert any(c[1] == "reduce-scatter" for c in found[layout, target])
    assert sum(c[0] for c in found["FSDP", "v5e-8"] if c[1] == "reduce-scatter") == 2
    assert sum(c[0] for c in found["FSDP", "h100-8"] if c[1] == "reduce-scatter") == 1


def test_only_gpu_and_tpu_run_collectives_asynchronously():
    found = layouts()
    assert not any(c[5] for (_, target), cs in found.items() if target == "cpu" for c in cs)
    for layout in ("replicated", "FSDP", "tensor parallel", "FSDP x tensor"):
        gpu = found[layout, "h100-8"]
        assert sum(c[0] for c in gpu if c[5]) >= sum(c[0] for c in gpu) - 1
    assert sum(c[0] for c in found["FSDP", "v5e-8"] if c[5]) == 2  # async_collective_fusion


def test_tensor_parallel_all_reduces_are_the_same_on_every_compiler():
    found = layouts()
    shapes = {
        target: sorted(
            (c[0], c[1], c[3], c[4])
            for c in found["tensor parallel", target]
            if c[2] != "f32" or target == "cpu"
        )
        for target in TARGETS
    }
    assert (
        shapes["cpu"]
        == shapes["h100-8"]
        == shapes["v5e-8"]
        == [(1, "all-reduce", 2, "data"), (1, "all-reduce", 4, "model")]
    )


def test_memory_shards_agree_and_temporaries_differ_as_the_pages_say():
    rows = memory()
    for layout in ("replicated", "FSDP", "tensor parallel", "FSDP x tensor"):
        shards = {tuple(rows[layout, t][:3]) for t in TARGETS}
        assert len(shards) == 1, layout  # arguments, outputs, aliased: the same everywhere
        assert rows[layout, "cpu"][4] - rows[layout, "cpu"][0] < 0.1  # CPU's peak: arguments
    assert rows["FSDP", "cpu"][3] == rows["replicated", "cpu"][3] == 67.1
    assert rows["FSDP", "h100-8"][3] == 20.3
    pages = "".join(
        (REPO / "docs/en" / p).read_text("utf-8")
        for p in (
            "other-hardware.md",
            "seeing-what-runs.md",
            "beyond-one-process/model-sharding.md",
        )
    )
    assert pages.count("20.3 MB") >= 3 and pages.count("67.1 MB") >= 3


def test_two_hosts_send_only_a_gradient_shard_across():
    lines = OUT["two_hosts"].splitlines()
    crossing = [line for line in lines if "along hosts " in line]
    assert len(crossing) == 1 and crossing[0].startswith("all-reduce      bf16")
    assert all(
        "gpus" in line
        for line in lines[:-1]
        if "along hosts" not in line and "hosts,gpus" not in line
    )
    sent = re.search(r"to the other host per step: ([\d,]+) of ([\d,]+)", lines[-1])
    across, total = (int(n.replace(",", "")) for n in sent.groups())
    assert round(across / 1e6) == 2 and round(total / 1e6) == 32  # "2 MB of the 32 MB"


def test_attention_scores_and_probabilities_materialise_on_gpu_and_on_cpu_without_ynn():
    temporaries = dict(re.findall(r"(\S+) +temporaries +([\d.]+) MB", OUT["attention"]))
    scores = float(re.search(r"the scores take ([\d.]+) MB", OUT["attention"])[1])
    assert float(temporaries["h100-8"]) == round(2 * scores, 1)  # scores and probabilities
    assert float(temporaries["cpu"]) > float(temporaries["h100-8"])  # library fusions off


def test_the_scheduler_turns_off_the_reduce_scatters_overlap():
    on, off = OUT["scheduler"].split("scheduler off:")
    assert "1 reduce-scatter bf16 2.1 MB among 8 (data,model) async" in on
    assert "1 reduce-scatter bf16 2.1 MB among 8 (data,model)\n" in off + "\n"
    # the weights' all-gather is the asynchronous one with the scheduler, the batch's without
    assert "1 all-gather bf16 16.8 MB among 8 (data,model) async" in on
    assert "1 all-gather bf16 0.5 MB among 8 (data,model) async" in off


def test_xla_tpu_gathers_each_weight_once_like_the_others():
    gathers = [c for c in layouts()["FSDP", "v5e-8"] if c[1] == "all-gather"]
    assert sum(c[0] for c in gathers) == 3  # two weights and the batch's activations


def test_limits_say_what_cannot_be_had():
    assert "cost_analysis() on XLA:GPU without a GPU: None" in OUT["limits"]
    assert "has 16 devices, more than v5e-8's 8" in OUT["limits"]


def test_every_megabyte_the_pages_state_is_recorded():
    """Each "N.N MB" in the prose of the pages that quote this output, in every language,
    is a number of the recording (which the snippet test compiles again)."""
    recorded = "\n".join(OUT.values())
    pages = [
        "other-hardware.md",
        "seeing-what-runs.md",
        "beyond-one-process/model-sharding.md",
        "more-ways-to-split/ring-attention.md",
    ]
    for language in ("en", "zh", "ko"):
        for page in pages:
            text = (REPO / "docs" / language / page).read_text("utf-8")
            prose = re.sub(r"```.*?```", "", text, flags=re.S)
            stated = set(re.findall(r"\b(\d+\.\d) ?MB\b", prose))
            missing = sorted(n for n in stated if n not in recorded)
            assert not missing, f"docs/{language}/{page} states MB no output has: {missing}"
