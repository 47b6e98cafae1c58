"""The page "The optimizer, the loss and the loop": its claims, read from loop.out (XLA:CPU,
8 simulated devices)."""

from __future__ import annotations

import re

import optax
from sitetools import REPO
from sitetools.snippets import read_sections

OUTPUT = read_sections((REPO / "snippets/training_step/loop.out").read_text(encoding="utf-8"))
PAGE = " ".join((REPO / "docs/en/training-step/loop.md").read_text("utf-8").split())


def test_the_decay_mask_leaves_out_norms_biases_and_the_embedding():
    lines = OUTPUT["optimizer"].splitlines()
    assert lines[0] == "decayed: hidden.kernel, out.kernel"
    assert lines[1] == "not decayed: embed.embedding, hidden.bias, norm.bias, norm.scale, out.bias"


def test_the_schedule_is_the_one_the_page_describes():
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 4, 24, 1e-3)
    shown = re.findall(r"'([\d.]+)'", OUTPUT["optimizer"])
    assert shown == [f"{schedule(s):.4f}" for s in (0, 2, 4, 14, 24)]
    assert shown[2] == "0.0100" and shown[-1] == "0.0010"
    assert "from 0 to 1e-2 over 4 steps, then falls along a cosine to 1e-3 at step 24" in PAGE


def test_the_loop_learns_and_logs_every_8_steps():
    steps = re.findall(r"steps +\d+- *(\d+): loss ([\d.]+), held out ([\d.]+)", OUTPUT["train"])
    assert [int(s) for s, _, _ in steps] == [8, 16, 24]
    losses = [float(loss) for _, loss, _ in steps]
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.05
    assert "Every 8 steps one `jax.device_get` fetches all of them" in PAGE


def test_summing_then_dividing_is_the_loss_of_the_whole_batch():
    counts = [int(n) for n in re.findall(r"\d+", OUTPUT["weighting"].splitlines()[0])]
    whole, mean_of_means, weighted = re.findall(r"\d+\.\d{4}", OUTPUT["weighting"])
    assert whole == weighted != mean_of_means
    assert f"the first holds {counts[0]} real tokens" in PAGE and f"the second {counts[1]}" in PAGE
    assert f"means, {mean_of_means}, gives" in PAGE and f"dividing once gives {weighted}" in PAGE
    assert round(counts[0] / counts[1]) == 3 and "about three times the weight" in PAGE


def test_the_guard_stops_the_index_but_not_a_cpu_read():
    first, second = OUTPUT["host_sync"].splitlines()
    assert first.startswith(
        "JaxRuntimeError: INVALID_ARGUMENT: Disallowed host-to-device transfer: "
        "aval=ShapedArray(int32[])"
    )
    assert second.startswith("float(loss) under the guard, on cpu: ")


def test_the_first_batch_counts_its_real_tokens():
    real, total = re.findall(r"(\d+) of (\d+)", OUTPUT["data"])[0]
    assert f"{real} of the first batch's {total}" in PAGE
