"""The "More ways to split" chapter's claims, read from its recorded outputs.

Every number the four pages state, and every byte count their scripts print beside a
formula, is checked here against the scripts' recorded outputs (XLA:CPU, 8 simulated
devices), and the formulas are computed again from the scripts' sizes, so that a change of
JAX, XLA or a script that moves a number, or breaks the agreement between the compiled
program and the formula, fails a test instead of leaving the prose wrong. Nothing here
runs JAX.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from sitetools import REPO
from sitetools.snippets import read_sections

CHAPTER = REPO / "snippets/more_splits"
SCRIPTS = ("pipeline", "collective_matmul", "ring_attention", "experts")
OUT = {
    name: text
    for script in SCRIPTS
    for name, text in read_sections((CHAPTER / f"{script}.out").read_text("utf-8")).items()
}
PAGES = {
    name: (REPO / "docs/en/more-ways-to-split" / f"{name}.md").read_text(encoding="utf-8")
    for name in ("pipeline", "collective-matmul", "ring-attention", "experts")
}
# The sizes of the snippet, as its code sets them.
N = 8  # devices, stages, sequence blocks, experts
D, MICRO, ROWS = 64, 4, 4  # the pipeline: width, micro-batches, rows per micro-batch
A_SHAPE, B_SHAPE = (16, 64), (64, 64)  # the collective matmul
BATCH, T, HEAD = 2, 64, 16  # ring attention
TOKENS, WIDTH, HIDDEN, TOP_K = 16, 32, 64, 2  # the experts, tokens per device
CAPACITY = TOKENS * TOP_K // N
F32 = 4


def number(text: str) -> int:
    return int(text.replace(",", ""))


def collectives(text: str) -> dict[tuple[str, str], tuple[int, int]]:
    """`show`'s lines: {(kind, "once" or "loop"): (count, bytes per step)}, checking that a
    looped collective's total is its bytes times the trips."""
    found = {}
    for kind, count, where, size, trips, total in re.findall(
        r"^  ([a-z-]+) x(\d+) (once|in the loop): ([\d,]+) B(?: x (\d+) trips = ([\d,]+) B)?$",
        text,
        flags=re.M,
    ):
        if where == "once":
            found[kind, "once"] = (int(count), number(size))
        else:
            assert number(total) == number(size) * int(trips)
            found[kind, "loop"] = (int(count), number(total))
    return found


def formula(pattern: str, text: str) -> list[int]:
    """The byte counts of a line printed beside the collectives (not the factors of a
    product: the `4` of `64 x 4 B`)."""
    line = re.search(pattern, text, flags=re.M)
    assert line, f"no line matching {pattern!r}"
    return [number(n) for n in re.findall(r"(?<!x )\b([\d,]+) B\b", line[0])]


class TestPipeline:
    def test_same_loss_and_gradients_as_one_device(self):
        text = OUT["pipeline_check"]
        loss = re.search(r"loss: pipeline ([\d.]+), one device ([\d.]+), within 1e-6", text)
        assert loss[1] == loss[2]
        assert "within 1e-6 relative: True" in text
        assert "gradients within 1e-5 relative (1e-6 absolute) of one device's: True" in text
        assert "gradient of the weights: float32[8@stage,64,64]" in text
        page = PAGES["pipeline"]
        assert "within 1e-6 relative" in page and "within\n1e-5 relative (1e-6 absolute)" in page

    def test_the_schedule_is_gpipe_and_its_bubble_the_formula(self):
        text = OUT["pipeline_check"]
        ticks = MICRO + N - 1
        rows = re.findall(r"^  stage (\d)  ([#.]+)$", text, flags=re.M)
        assert [int(s) for s, _ in rows] == list(range(N))
        for stage, row in rows:  # stage s works on micro-batch t - s at tick t
            assert row == "." * int(stage) + "#" * MICRO + "." * (ticks - MICRO - int(stage))
        idle = sum(row.count(".") for _, row in rows)
        measured = Fraction(idle, N * ticks)
        assert measured == Fraction(N - 1, ticks) == Fraction(7, 11)
        assert f"bubble: measured {float(measured):.4f}, (S-1)/(M+S-1) = 0.6364" in text
        assert "0.6364" in PAGES["pipeline"] and "7/11" in PAGES["pipeline"]

    def test_collectives_agree_with_one_activation_per_tick(self):
        text = OUT["pipeline_check"]
        ticks = MICRO + N - 1
        activation = ROWS * D * F32
        assert collectives(text) == {
            ("all-reduce", "once"): (1, F32),  # the psum of the loss
            ("collective-permute", "loop"): (2, 2 * ticks * activation),  # forward, backward
        }
        assert formula(r"^one activation:.*", text) == [activation, 2 * ticks * activation]
        assert activation == 1_024 and 2 * ticks * activation == 22_528

    def test_a_carry_that_starts_invariant_fails_to_trace(self):
        text = OUT["invariant_carry"]
        assert text.startswith("TypeError: scan body function carry input and carry output")
        assert "float32[1,64]{V:stage}, so the manual axis types do not match" in text
        assert "jax.lax.pcast(..., ('stage',), to='varying')" in text
        assert "`{V:stage}`" in PAGES["pipeline"]

    def test_the_bubble_shrinks_as_micro_batches_grow(self):
        rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", OUT["bubble"], re.M)
        assert [int(m) for m, *_ in rows] == [1, 2, 4, 8, 16, 32, 64]
        bubbles = []
        for micro, ticks, measured, formula_value in rows:
            assert int(ticks) == int(micro) + N - 1
            expected = f"{(N - 1) / int(ticks):.4f}"
            assert measured == formula_value == expected
            bubbles.append(float(measured))
        assert bubbles == sorted(bubbles, reverse=True)
        assert (bubbles[0], bubbles[-1]) == (0.875, 0.0986)

    def test_a_layer_undefined_at_zero_poisons_the_gradients_unless_guarded(self):
        """The bubble's ticks run the layer on zeros: the loss stays right, the gradients
        are NaN, until the idle ticks get ones before the layer (`guard`)."""
        text = OUT["bubble_nan"]
        reference = re.search(r"one device: loss ([\d.]+), NaN in the gradients: False", text)
        runs = re.findall(
            r"pipeline, bubble inputs replaced by ones: (\w+)\n"
            r"  loss ([\d.]+), NaN in the gradients: (\w+)\n"
            r"  gradients within 1e-5 relative \(1e-6 absolute\) of one device's: (\w+)",
            text,
        )
        assert runs == [
            ("False", reference[1], "True", "False"),
            ("True", reference[1], "False", "True"),
        ]
        page = PAGES["pipeline"]
        assert "`guard`" in page and "0 × NaN is NaN" in page
        assert '--8<-- "snippets/more_splits/pipeline.py:bubble_nan"' in page

    def test_the_guard_masks_the_input_of_the_layer_in_the_bubble(self):
        code = (CHAPTER / "pipeline.py").read_text(encoding="utf-8")
        tick = code[code.index("def tick(carry, t):") :]
        guard = tick.index("x = jnp.where(active(t, stage, micro), x, 1.0)")
        assert tick.index("if guard:") < guard < tick.index("y = layer(w, b, x)")

    def test_a_data_axis_sums_weight_gradients_per_tick_unless_they_vary(self):
        text = OUT["pipeline_data"]
        without, with_pcast, line = re.split(r"^(?=2 x 4 mesh|one stage)", text, flags=re.M)[1:]
        assert without.startswith(
            "2 x 4 mesh, weights made varying over data before the loop: False"
        )
        assert with_pcast.startswith(
            "2 x 4 mesh, weights made varying over data before the loop: True"
        )
        ticks = MICRO + 4 - 1  # 4 stages
        stage = (D * D + D) * F32  # one stage's weights and biases
        permutes = 2 * ticks * (ROWS // 2) * D * F32  # rows split over 2 devices of "data"
        assert collectives(without) == {
            ("all-reduce", "once"): (1, F32),
            ("all-reduce", "loop"): (1, ticks * stage),
            ("collective-permute", "loop"): (2, permutes),
        }
        assert collectives(with_pcast) == {
            ("all-reduce", "once"): (2, stage + F32),
            ("collective-permute", "loop"): (2, permutes),
        }
        assert formula(r"^one stage's.*", line) == [stage, ticks * stage]
        assert (stage, ticks * stage, stage + F32) == (16_640, 116_480, 16_644)


class TestCollectiveMatmul:
    def test_the_ring_computes_the_all_gather_product(self):
        text = OUT["collective_matmul"]
        assert "ring_matmul equal to allgather_matmul within 1e-5: True" in text
        assert "both within 1e-5 of NumPy's A @ B: True" in text
        assert "agree to within 1e-5" in PAGES["collective-matmul"]

    def test_the_ring_sends_what_the_all_gather_brings(self):
        text = OUT["collective_matmul"]
        gathered, ring = re.split(r"^ring_matmul:$", text, flags=re.M)
        a_bytes = A_SHAPE[0] * A_SHAPE[1] * F32
        block = a_bytes // N
        assert collectives(gathered) == {("all-gather", "once"): (1, a_bytes)}
        assert collectives(ring) == {("collective-permute", "loop"): (1, (N - 1) * block)}
        # The scaling book's all-gather: each device receives (N-1)/N of the array.
        assert formula(r"^A is.*", text) == [a_bytes, a_bytes * (N - 1) // N]
        assert formula(r"^the ring:.*", text) == [block, (N - 1) * block]
        assert (a_bytes, block, (N - 1) * block) == (4_096, 512, 3_584)

    def test_xla_cpu_emits_synchronous_collectives(self):
        """`show` prints `-start` for an asynchronous collective; the page says none is."""
        assert "-start x" not in "\n".join(OUT.values())
        assert "`collective-permute`, not `collective-permute-start`" in (
            PAGES["collective-matmul"].replace("\n", " ")
        )


class TestRingAttention:
    def layouts(self) -> dict[str, tuple[str, list[int], list[int], int]]:
        found = {}
        for name, same, blocks, scores, total in re.findall(
            r"^(\S+): equal to full attention within 1e-5: (\w+)\n"
            r"  blocks with a score to compute, per device: \[([\d, ]+)\]\n"
            r"  scores to compute, per device, of 8 x 64 = 512: \[([\d, ]+)\], ([\d,]+) in all",
            OUT["ring_check"],
            flags=re.M,
        ):
            as_list = [int(n) for n in blocks.split(", ")], [int(n) for n in scores.split(", ")]
            found[name] = (same, *as_list, number(total))
        return found

    def test_both_layouts_compute_full_attention(self):
        layouts = self.layouts()
        assert list(layouts) == ["contiguous", "zig-zag"]
        assert all(same == "True" for same, *_ in layouts.values())
        assert "within 1e-5" in PAGES["ring-attention"]

    def test_contiguous_is_unbalanced_and_zig_zag_is_not(self):
        layouts = self.layouts()
        block = T // N
        causal = T * (T + 1) // 2  # the scores a causal sequence has
        _, blocks, scores, total = layouts["contiguous"]
        assert blocks == list(range(1, N + 1))
        # Device i's queries are at positions 8i .. 8i+7, each sees position + 1 keys.
        assert scores == [sum(p + 1 for p in range(block * i, block * (i + 1))) for i in range(N)]
        assert (scores[0], scores[-1]) == (36, 484)
        _, blocks, scores, zig_total = layouts["zig-zag"]
        assert blocks == [N] * N
        assert scores == [causal // N] * N == [260] * N
        assert total == zig_total == causal == 2_080

    def test_the_ring_moves_what_all_gathering_k_and_v_brings(self):
        text = OUT["ring_check"]
        blocks = 2 * BATCH * (T // N) * HEAD * F32  # a key and a value block
        ring = text.split("collectives of all-gather context parallelism:")[0]
        assert collectives(ring) == {("collective-permute", "loop"): (2, (N - 1) * blocks)}
        k_and_v = 2 * BATCH * T * HEAD * F32
        assert formula(r"^K and V blocks.*", text) == [
            blocks,
            (N - 1) * blocks,
            k_and_v * (N - 1) // N,
        ]
        assert (N - 1) * blocks == k_and_v * (N - 1) // N == 14_336

    def test_all_gather_context_parallelism_gathers_k_and_v_once(self):
        text = OUT["ring_check"]
        assert "all-gather context parallelism: equal to full attention within 1e-5: True" in text
        gathered = text.split("collectives of all-gather context parallelism:")[1]
        k_and_v = 2 * BATCH * T * HEAD * F32  # the result: all of K and of V
        assert collectives(gathered.split("K and V blocks")[0]) == {
            ("all-gather", "once"): (2, k_and_v)
        }
        assert k_and_v == 16_384

    def test_memory_of_full_attention_all_gather_and_ring(self):
        text = OUT["ring_check"]
        assert (
            "temporary bytes on XLA:CPU: full attention on one device 65,536; per device, "
            "all-gather context parallelism 24,580, ring attention 5,280" in text
        )
        scores = BATCH * T * T * F32
        assert formula(r"^scores:.*", text) == [
            scores,
            scores // N,  # one device's queries against every key
            BATCH * (T // N) ** 2 * F32,
        ]
        assert 65_536 == 2 * scores  # "twice its 32,768 bytes of scores"
        # Splitting the queries is most of the saving; the ring's own is the rest.
        assert 5_280 < 24_580 < 65_536 and 65_536 - 24_580 > 24_580 - 5_280
        page = PAGES["ring-attention"].replace("\n", " ")
        assert "XLA:CPU's buffer assignment" in page and "two separate savings" in page

    def test_the_backward_pass_keeps_every_step_unless_rematerialised(self):
        text = OUT["ring_memory"]
        without, remat = re.split(r"^(?=jax\.checkpoint:)", text, flags=re.M)
        head = re.search(
            r"keeps (\d+) arrays, ([\d,]+) B per device\n  one per step: (\d+), ([\d,]+)", without
        )
        assert (int(head[1]), number(head[2]), int(head[3]), number(head[4])) == (
            32,
            40_072,
            12,
            32_256,
        )
        kinds = dict(re.findall(r"^    (\S+) x(\d+)$", without, flags=re.M))
        assert sum(map(int, kinds.values())) == 12
        assert kinds[f"f32[{(N - 1) * N}@seq,{BATCH},{T // N},{HEAD}]"] == "3"  # block-shaped
        # Under jax.checkpoint: q, k, v (a block each per device) and the table of positions.
        arguments = 3 * BATCH * (T // N) * HEAD * F32 + N * (T // N) * 4
        assert remat.startswith(
            f"jax.checkpoint: the backward pass keeps 4 arrays, {arguments:,} B"
        )
        assert "one per step: 0, 0 B per device" in remat
        assert arguments == 3_328


class TestExperts:
    def test_the_layer_computes_the_dense_reference(self):
        assert "equal to the dense reference within 1e-5: True" in OUT["experts_check"]
        assert "to within 1e-5" in PAGES["experts"]

    def test_choices_and_drops(self):
        text = OUT["experts_check"]
        wanted = re.search(
            r"choices per expert, of (\d+): \[([\d, ]+)\] \(room for (\d+) each\)", text
        )
        choices = [int(n) for n in wanted[2].split(", ")]
        assert int(wanted[1]) == sum(choices) == N * TOKENS * TOP_K == 256
        assert int(wanted[3]) == N * CAPACITY == 32
        assert max(choices) == choices[3] == 43
        dropped = re.search(r"choices dropped, per device: \[([\d, ]+)\], (\d+) of 256", text)
        per_device = [int(n) for n in dropped[1].split(", ")]
        assert len(per_device) == N and sum(per_device) == int(dropped[2]) == 42

    def test_the_all_to_alls_move_the_capacity_buffer(self):
        text = OUT["experts_check"]
        buffer = N * CAPACITY * WIDTH * F32
        assert collectives(text) == {("all-to-all", "once"): (2, 2 * buffer)}
        assert formula(r"^each all-to-all.*", text) == [buffer, buffer * (N - 1) // N]
        assert (buffer, 2 * buffer, buffer * (N - 1) // N) == (4_096, 8_192, 3_584)

    def test_ragged_all_to_all_is_not_implemented_on_xla_cpu(self):
        assert OUT["ragged"].startswith(
            "JaxRuntimeError: UNIMPLEMENTED: HLO opcode `ragged-all-to-all`"
        )
        assert "XLA:CPU" in OUT["ragged"]

    def test_the_ragged_plan_delivers_every_choice(self):
        """The plan, run through ragged_all_to_all's documented semantics, gives each expert
        the choices the router made (the same as the fixed-capacity layer's), none dropped."""
        text = OUT["ragged"]
        assert "each expert gets exactly its choices: True" in text
        rows = re.search(r"rows per expert: \[([\d, ]+)\], of room for (\d+) each", text)
        wanted = re.search(r"choices per expert, of \d+: \[([\d, ]+)\]", OUT["experts_check"])
        assert rows[1] == wanted[1]
        per_expert = [int(n) for n in rows[1].split(", ")]
        assert sum(per_expert) == N * TOKENS * TOP_K and max(per_expert) == 43 > N * CAPACITY
        assert int(rows[2]) == N * TOKENS == 128  # a token's choices are different experts
        page = PAGES["experts"]
        assert "43 to expert 3" in page and "room for 32" in page and "here 128 rows" in page

    def test_one_hot_routing_grows_with_the_square_of_the_tokens(self):
        text = OUT["experts_scale"]
        assert text.startswith("one device, XLA:CPU: the one-hot layer")
        rows = re.findall(
            r"^ +([\d,]+) +([\d,]+) +([\d.]+) MiB +([\d,.]+) MFLOP$", text, flags=re.M
        )
        tokens = [number(t) for t, *_ in rows]
        assert tokens == [256, 1_024, 2_048]
        for t, (_, entries, *_) in zip(tokens, rows, strict=True):
            assert number(entries) == t * N * (t * TOP_K // N) == t * t * TOP_K  # T^2 k
        temp = [float(mib) for _, _, mib, _ in rows]
        assert temp == [2.0, 32.0, 128.0]  # the square: 4 and 8 times the tokens
        assert [m / temp[0] for m in temp] == [(t / 256) ** 2 for t in tokens]
        flops = [float(f.replace(",", "")) for *_, f in rows]
        grouped = re.search(r"^2,048 tokens in groups of 256: +([\d.]+) MiB +([\d.]+)", text, re.M)
        ordered = re.search(r"^2,048 tokens sorted by expert: +([\d.]+) MiB +([\d.]+)", text, re.M)
        assert float(grouped[1]) == 8 * temp[0] == 16.0  # linear again: 8 groups of 256
        assert float(ordered[1]) == 9.1 < float(grouped[1])
        own = 2_048 * TOP_K * 2 * (WIDTH * HIDDEN + HIDDEN * WIDTH) / 1e6
        assert f"2,048 tokens x 2 choices: {own:.1f} MFLOP" in text
        assert own < flops[-1] / 20  # at 2,048 tokens, routing is nearly all the work
        # On CPU ragged_dot multiplies every row by every expert's weights: 8 times the work.
        assert N * own < float(ordered[2]) < (N + 1) * own
        assert "sorted, equal to the dropless reference within 1e-5: True" in text
        page = PAGES["experts"].replace("\n", " ")
        for stated in ("2.0 MiB at 256 tokens", "128.0 MiB at 2,048", "1,176.5 million",
                       "33.6 million", "16.0 MiB, 8 times", "9.1 MiB here", "282.9 million"):  # fmt: skip
            assert stated in page, stated

    def test_the_table_of_splits(self):
        table = PAGES["experts"].split("## Which split, when")[1].split("## Pitfalls")[0]
        rows = [line for line in table.splitlines() if line.startswith("| [")]
        assert [re.match(r"\| \[([^\]]+)\]", row)[1] for row in rows] == [
            "data parallelism",
            "FSDP",
            "tensor parallelism",
            "pipeline",
            "collective matmul",
            "ring attention",
            "expert parallelism",
        ]
        for split, stated in {
            "pipeline": "22,528",
            "collective matmul": "3,584",
            "ring attention": "14,336",
            "expert parallelism": "8,192",
        }.items():
            assert stated in next(row for row in rows if row.startswith(f"| [{split}]"))


@pytest.mark.parametrize("page", list(PAGES))
def test_every_number_of_the_prose_is_recorded(page):
    """Each number with a thousands separator, each 4-decimal fraction, and each tolerance
    that a page states appears in the recorded output."""
    recorded = "\n".join(OUT.values())
    prose = re.sub(r"```.*?```|`[^`\n]*`", "", PAGES[page], flags=re.S)  # not code
    numbers = set(re.findall(r"\b\d{1,3}(?:,\d{3})+\b|\b\d\.\d{4}\b|\b1e-\d\b", prose))
    assert numbers, "the page states no numbers?"
    missing = sorted(n for n in numbers if n not in recorded)
    assert not missing, f"{page}.md states numbers that no recorded output has: {missing}"
