"""The calculator of "Will it fit?" in a real browser (the fixtures of test_browser.py):
for a few inputs it shows what ``jaxpar.plan_memory`` gives, byte for byte; bad input
gets the page's message; without script the page still holds the recorded table."""

from __future__ import annotations

import pytest
import test_browser as shared

from jaxpar import LLAMA_3_1_8B, LLAMA_3_2_1B, Decoder, Parallelism, Training, plan_memory

pytestmark = pytest.mark.browser

# test_browser.py's fixtures: the built site served locally, Chromium, a page that records
# console errors and refuses requests that leave the site.
base_url, browser, page, prefix = shared.base_url, shared.browser, shared.page, shared.prefix

PAGE = "training-step/will-it-fit/"

# (what to set on the page, what plan_memory is asked): the page starts at Llama 3.1 8B,
# FSDP 8 on h100-8, a batch of 16, bfloat16, remat full.
CASES = {
    "the defaults": ({}, (LLAMA_3_1_8B, Parallelism(fsdp=8), Training(16, remat="full"), "h100-8")),
    "1B on a v5e-8, FSDP x tensor, accumulation, float32, no remat": (
        {
            "preset": "llama-3.2-1b",
            "target": "v5e-8",
            "fsdp": "4",
            "tensor": "2",
            "batch": "32",
            "microbatches": "2",
            "compute": "float32",
            "remat": "none",
        },
        (
            LLAMA_3_2_1B,
            Parallelism(fsdp=4, tensor=2),
            Training(32, microbatches=2, compute="float32", remat="none"),
            "v5e-8",
        ),
    ),
    "custom sizes on 2 hosts, longer sequences": (
        {"layers": "40", "d_ff": "16384", "seq_len": "4096", "target": "h100-16"}
        | {"data": "2", "fsdp": "8", "batch": "64"},
        (
            Decoder(128256, 4096, 40, 32, 8, 16384, 4096),
            Parallelism(data=2, fsdp=8),
            Training(64, remat="full"),
            "h100-16",
        ),
    ),
}


def set_inputs(page, values: dict[str, str]) -> None:
    for name, value in values.items():
        selector = f"#memory-plan [name={name}]"
        if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
            page.select_option(selector, value)
        else:
            page.fill(selector, value)


def shown(page) -> dict[str, tuple[str, int | None]]:
    """Each row of the calculator's result: its text and its bytes."""
    return page.eval_on_selector_all(
        "#memory-plan tr[data-term]",
        """rows => Object.fromEntries(rows.map(r => {
            const td = r.querySelector('td');
            return [r.dataset.term, [td.textContent,
                    td.dataset.bytes === undefined ? null : Number(td.dataset.bytes)]];
        }))""",
    )


@pytest.mark.parametrize("case", CASES)
def test_the_calculator_shows_what_plan_memory_gives(page, base_url, case):
    inputs, (decoder, layout, training, target) = CASES[case]
    code = "zh" if case == "the defaults" else "en"  # a translated page: its own messages
    page.goto(base_url + prefix(code) + PAGE, wait_until="load")
    set_inputs(page, inputs)
    expected = plan_memory(decoder, layout, training, target)
    rows = shown(page)
    for term, size in [*expected.terms.items(), ("total", expected.total)]:
        text, bytes_ = rows[term]
        assert abs(bytes_ - size) <= 1, (term, bytes_, size)
        assert text == f"{size / 2**30:.2f} GiB", (term, text)
    assert rows["memory"] == [f"{expected.memory_bytes / 2**30:.2f} GiB", expected.memory_bytes]
    verdict = page.inner_text("#memory-plan .memory-plan__verdict")
    left = f"{abs(expected.headroom) / 2**30:.2f}"
    memory = f"{expected.memory_bytes / 2**30:.2f}"
    message = page.get_attribute(
        "#memory-plan", "data-msg-fits" if expected.fits else "data-msg-short"
    )
    assert verdict.startswith(message.format(left=left, short=left, memory=memory)), verdict
    assert page.errors == []


def test_bad_input_gets_the_pages_message(page, base_url):
    page.goto(base_url + PAGE, wait_until="load")
    set_inputs(page, {"fsdp": "2", "tensor": "3"})  # 8 devices? no: and 8 kv heads by 3
    assert page.inner_text("#memory-plan .memory-plan__verdict") == (
        "kv_heads (8) must be a multiple of tensor (3): each device of the tensor axis keeps "
        "whole key and value heads."
    )
    assert shown(page)["total"] == ["—", None]
    set_inputs(page, {"tensor": "1"})
    assert page.inner_text("#memory-plan .memory-plan__verdict") == (
        "The layout uses 2 devices, but h100-8 has 8."
    )
    set_inputs(page, {"fsdp": "8", "batch": "12"})
    assert "The batch (12) must be a multiple of data × fsdp × micro-batches (8)" in (
        page.inner_text("#memory-plan .memory-plan__verdict")
    )
    set_inputs(page, {"batch": "16"})
    assert page.inner_text("#memory-plan .memory-plan__verdict").startswith("Fits")
    # The form and the tables, as test_browser checks the other page types.
    from axe_playwright_python.sync_playwright import Axe

    violations = Axe().run(page, options={"resultTypes": ["violations"]}).response["violations"]
    serious = [(v["id"], v["help"]) for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, serious
    assert page.errors == []


def test_without_script_the_table_is_there_and_the_calculator_is_not(browser, base_url):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(base_url + PAGE)
    assert page.locator("table td:text-is('8B')").count() == 5  # the recorded grid's 8B rows
    assert not page.is_visible("#memory-plan")
    assert page.is_visible("noscript") or page.locator("noscript").count() == 1
    context.close()
