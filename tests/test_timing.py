"""Tests of jaxpar.timing with fake clocks: no wall-clock assertions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpar import Timing, benchmark


def replay(times_s: list[float]):
    """A clock that reads (start, start + duration) for each duration in ``times_s``."""
    ticks = []
    for i, duration in enumerate(times_s):
        ticks += [10.0 * i, 10.0 * i + duration]
    return iter(ticks).__next__


class Output:
    """A fake output that records when it is waited for."""

    def __init__(self, log: list[str]):
        self.log = log

    def block_until_ready(self) -> Output:
        self.log.append("block")
        return self


class TestBenchmark:
    def test_statistics_of_an_odd_count(self):
        timing = benchmark(lambda: None, repeats=5, clock=replay([3e-3, 1e-3, 2e-3, 5e-3, 4e-3]))
        assert timing.median_s == pytest.approx(3e-3)
        assert timing.best_s == pytest.approx(1e-3)
        assert timing.worst_s == pytest.approx(5e-3)
        assert timing.iqr_s == pytest.approx(2e-3)  # 4 ms - 2 ms
        assert timing.repeats == 5
        assert timing.times_s == pytest.approx((3e-3, 1e-3, 2e-3, 5e-3, 4e-3))

    def test_statistics_of_an_even_count_interpolate(self):
        timing = benchmark(lambda: None, repeats=4, clock=replay([4.0, 1.0, 3.0, 2.0]))
        assert timing.median_s == pytest.approx(2.5)
        assert timing.iqr_s == pytest.approx(3.25 - 1.75)
        assert (timing.best_s, timing.worst_s) == pytest.approx((1.0, 4.0))

    def test_one_repeat(self):
        timing = benchmark(lambda: None, warmup=0, repeats=1, clock=replay([0.5]))
        assert (timing.median_s, timing.best_s, timing.worst_s, timing.iqr_s) == (
            0.5,
            0.5,
            0.5,
            0.0,
        )

    def test_waits_for_every_output_before_reading_the_clock(self):
        log: list[str] = []

        def fn(x, *, scale):
            log.append(f"call {x} {scale}")
            return {"out": [Output(log)]}

        def clock():
            log.append("clock")
            return float(len(log))

        benchmark(fn, 1, warmup=2, repeats=3, clock=clock, scale=2)
        warm = ["call 1 2", "block"]
        timed = ["clock", "call 1 2", "block", "clock"]
        assert log == warm * 2 + timed * 3

    def test_pipeline_dispatches_every_call_before_waiting(self):
        log: list[str] = []

        def fn():
            log.append("call")
            return Output(log)

        def clock():
            log.append("clock")
            return float(len(log))

        timing = benchmark(fn, warmup=1, repeats=2, pipeline=3, clock=clock)
        run = ["clock", "call", "call", "call", "block", "block", "block", "clock"]
        assert log == ["call", "block"] + run * 2
        assert timing.pipeline == 3
        assert timing.repeats == 2

    def test_pipeline_times_are_per_call(self):
        timing = benchmark(lambda: None, repeats=3, pipeline=4, clock=replay([4.0, 8.0, 6.0]))
        assert timing.times_s == pytest.approx((1.0, 2.0, 1.5))
        assert timing.median_s == pytest.approx(1.5)
        assert str(timing) == "1.50 s ± 0.50 s (median ± IQR of 3 × 4 pipelined calls)"

    @pytest.mark.parametrize("pipeline", [0, -2, 2.0, True, "4", None])
    def test_bad_pipeline(self, pipeline):
        with pytest.raises(ValueError) as caught:
            benchmark(lambda: None, pipeline=pipeline)
        message = str(caught.value)
        assert (
            f"pipeline must be a whole number of calls dispatched before waiting, 1 or more, "
            f"got {pipeline!r}" in message
        )
        assert "pipeline=1 to time each call alone (latency)" in message

    def test_jax_outputs_are_ready(self):
        f = jax.jit(lambda x: x * 2)
        timing = benchmark(f, jnp.arange(4.0), repeats=3, clock=replay([1.0, 2.0, 3.0]))
        assert timing.median_s == 2.0

    def test_every_tick_is_read_once(self):
        ticks = iter([0.0, 1.0, 1.0, 3.0])
        benchmark(lambda: None, repeats=2, clock=ticks.__next__)
        assert next(ticks, "done") == "done"

    @pytest.mark.parametrize("warmup", [-1, 1.5, True, "2"])
    def test_bad_warmup(self, warmup):
        with pytest.raises(ValueError) as caught:
            benchmark(lambda: None, warmup=warmup)
        message = str(caught.value)
        assert f"warmup must be a whole number of untimed calls, 0 or more, got {warmup!r}" in (
            message
        )
        assert "warmup=0 to time the first call, compilation included" in message

    @pytest.mark.parametrize("repeats", [0, -3, 2.0, True, None])
    def test_bad_repeats(self, repeats):
        with pytest.raises(ValueError) as caught:
            benchmark(lambda: None, repeats=repeats)
        message = str(caught.value)
        assert f"repeats must be a whole number of timed calls, 1 or more, got {repeats!r}" in (
            message
        )
        assert "repeats=10" in message

    def test_fn_must_be_callable(self):
        with pytest.raises(TypeError, match="a function to call first, got 3"):
            benchmark(3)

    def test_clock_must_be_callable(self):
        with pytest.raises(TypeError, match=r"iter\(times\).__next__"):
            benchmark(lambda: None, clock=[0.0, 1.0])

    def test_a_clock_that_runs_out_names_it_and_the_readings_it_needs(self):
        ticks = iter([0.0, 1.0, 2.0])
        with pytest.raises(ValueError) as caught:
            benchmark(lambda: None, repeats=3, clock=ticks.__next__)
        message = str(caught.value)
        assert f"the clock {ticks.__next__!r} ran out after 3 readings" in message
        assert "before and after each of the 3 timed calls or runs, 6 readings in all" in message
        assert "Give it 6 times, or leave clock out" in message
        assert caught.value.__suppress_context__  # no bare StopIteration shown above it

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), None, "1.0"])
    def test_a_clock_that_returns_no_finite_number(self, value):
        with pytest.raises(ValueError) as caught:
            benchmark(lambda: None, repeats=2, clock=lambda: value)
        assert f"returned {value!r} at reading 1" in str(caught.value)
        assert "the time in seconds as a finite number" in str(caught.value)

    def test_a_frozen_clock(self):
        with pytest.raises(ValueError, match="did not move: every timed call took 0 s"):
            benchmark(lambda: None, repeats=3, clock=lambda: 5.0)

    def test_numpy_integer_counts(self):
        clock = replay([1.0, 3.0])
        timing = benchmark(lambda: None, warmup=np.int64(1), repeats=np.int64(2), clock=clock)
        assert (timing.repeats, type(timing.repeats)) == (2, int)
        assert str(timing) == "2.00 s ± 1.00 s (median ± IQR of 2)"

    def test_a_clock_going_backwards(self):
        with pytest.raises(ValueError, match="the clock went backwards: a call took -1.0 s"):
            benchmark(lambda: None, repeats=1, clock=iter([2.0, 1.0]).__next__)


class TestTimingStr:
    @pytest.mark.parametrize(
        ("median_s", "iqr_s", "repeats", "text"),
        [
            (1.234e-3, 5e-5, 10, "1.23 ms ± 0.05 ms (median ± IQR of 10)"),
            (12.34e-3, 5e-4, 10, "12.3 ms ± 0.5 ms (median ± IQR of 10)"),
            (123.4e-3, 4e-3, 7, "123 ms ± 4 ms (median ± IQR of 7)"),
            (2.5, 0.1, 3, "2.50 s ± 0.10 s (median ± IQR of 3)"),
            (42e-6, 3e-6, 10, "42.0 µs ± 3.0 µs (median ± IQR of 10)"),
            (0.25e-6, 0.01e-6, 10, "0.250 µs ± 0.010 µs (median ± IQR of 10)"),
            (0.0, 0.0, 1, "0.00 µs ± 0.00 µs (median ± IQR of 1)"),
            (999.96e-6, 2e-6, 10, "1.00 ms ± 0.00 ms (median ± IQR of 10)"),
            (0.99996, 0.02, 10, "1.00 s ± 0.02 s (median ± IQR of 10)"),
        ],
    )
    def test_units_and_digits(self, median_s, iqr_s, repeats, text):
        assert str(Timing(median_s, median_s, median_s, iqr_s, repeats)) == text

    def test_a_timing_made_by_hand_with_nan_still_prints(self):
        nan = float("nan")
        assert str(Timing(nan, nan, nan, nan, 1)) == "nan µs ± nan µs (median ± IQR of 1)"


def test_a_donating_function_is_refused_with_what_to_time_instead():
    donating = jax.jit(lambda x: x + 1, donate_argnums=0)
    with pytest.raises(RuntimeError, match="the function donates its inputs. Time it jitted"):
        benchmark(donating, jnp.zeros(1000), warmup=2, repeats=1)
    plain = jax.jit(lambda x: x + 1)
    assert benchmark(plain, jnp.zeros(1000), warmup=2, repeats=1).repeats == 1
