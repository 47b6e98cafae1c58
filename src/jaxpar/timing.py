"""Timing JAX code honestly: compile first, wait for the result, report the spread."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from jaxpar._checks import is_whole


@dataclass(frozen=True)
class Timing:
    """How long the timed calls of :func:`benchmark` took, in seconds."""

    median_s: float
    """The median time of one call."""
    best_s: float
    """The fastest call."""
    worst_s: float
    """The slowest call."""
    iqr_s: float
    """The interquartile range: 75th minus 25th percentile (interpolated, as ``np.percentile``)."""
    repeats: int
    """How many calls were timed, or with ``pipeline`` above 1, how many runs of calls."""
    times_s: tuple[float, ...] = field(default=(), repr=False)
    """Every timed call (or run's time per call), in the order they ran."""
    pipeline: int = 1
    """How many calls each timed run dispatched before waiting; the times are per call."""

    def __str__(self) -> str:
        """``"1.23 ms ± 0.05 ms (median ± IQR of 10)"``, in s, ms or µs; with ``pipeline``
        above 1, ``"… (median ± IQR of 10 × 8 pipelined calls)"``."""
        rounded = float(f"{self.median_s:.3g}")  # so that 999.96 µs reads 1.00 ms
        unit, factor = next(
            ((u, f) for u, f in (("s", 1.0), ("ms", 1e-3)) if rounded >= f), ("µs", 1e-6)
        )
        median, iqr = self.median_s / factor, self.iqr_s / factor
        # Three significant digits for the median; the IQR to the same decimal place.
        finite = 0 < rounded < math.inf
        digits = min(max(0, 2 - math.floor(math.log10(rounded / factor))), 6) if finite else 2
        runs = f"{self.repeats} × {self.pipeline} pipelined calls" if self.pipeline > 1 else ""
        return (
            f"{median:.{digits}f} {unit} ± {iqr:.{digits}f} {unit} "
            f"(median ± IQR of {runs or self.repeats})"
        )


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 2,
    repeats: int = 10,
    pipeline: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    **kwargs: Any,
) -> Timing:
    """Time ``fn(*args, **kwargs)``, compiled and finished, over several calls.

    JAX dispatches work asynchronously and compiles a jitted function on its first call,
    so a plain ``perf_counter`` around one call measures compilation, or only the
    dispatch. This calls ``fn`` ``warmup`` times first (compilation happens there), then
    times ``repeats`` calls, each until ``jax.block_until_ready`` returns for its output,
    and reports the median and the spread rather than one number.

    Waiting after every call measures latency: one call's time, Python dispatch included.
    A training loop instead dispatches the next step while the devices still run the
    previous one. ``pipeline=n`` measures throughput of that kind: each timed run
    dispatches ``n`` independent calls with the same arguments back to back, waits once
    for all their outputs, and counts the elapsed time divided by ``n``. Unlike a loop's
    steps, the calls do not take each other's outputs. Neither mode tells host time from
    device time; a trace recorded with ``jax.profiler.trace`` does.

    Args:
        fn: the function to time, usually ``jax.jit``-ed.
        *args: positional arguments for ``fn``.
        warmup: untimed calls made first, at least 0.
        repeats: timed calls (or runs of ``pipeline`` calls), at least 1.
        pipeline: independent calls dispatched before waiting, at least 1; 1 (the
            default) times each call alone. All ``pipeline`` outputs are alive at once, so
            memory grows with it.
        clock: a function giving the time in seconds, ``time.perf_counter`` by default; it
            is read before and after every timed call or run.
        **kwargs: keyword arguments for ``fn`` (other than ``warmup``, ``repeats``,
            ``pipeline`` and ``clock``, which are this function's).

    Returns:
        The :class:`Timing`; ``str()`` of it reads like ``"1.23 ms ± 0.05 ms (median ±
        IQR of 10)"``.

    ``fn`` is called again and again with the same arguments, so it must not donate them:
    a training step jitted with ``donate_argnames`` deletes its inputs on the first call.
    Time the same step jitted without donation, or a loop that passes each call's outputs
    to the next.

    Raises:
        TypeError: ``fn`` or ``clock`` is not callable.
        RuntimeError: ``fn`` donated an argument, which its first call deleted.
        ValueError: ``warmup``, ``repeats`` or ``pipeline`` is out of range, or the clock
            ran out (an iterator's ``__next__``), returned something other than a finite
            number, went backwards or did not move.

    Examples:
        A fake clock that replays fixed times makes the result the same on every machine;
        leave ``clock`` out to measure for real:

        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import benchmark

        f = jax.jit(lambda x: x @ x.T)
        x = jnp.ones((256, 256))
        ticks = iter([0.0, 0.0012, 1.0, 1.0013, 2.0, 2.0011, 3.0, 3.0015, 4.0, 4.0012])
        timing = benchmark(f, x, repeats=5, clock=ticks.__next__)
        print(timing)
        #> 1.20 ms ± 0.10 ms (median ± IQR of 5)
        print(f"{timing.best_s * 1e3:.1f} ms to {timing.worst_s * 1e3:.1f} ms")
        #> 1.1 ms to 1.5 ms
        ```

        Throughput: each of 3 runs dispatches 4 calls, then waits once; the times are per call:

        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import benchmark

        f = jax.jit(lambda x: x @ x.T)
        x = jnp.ones((256, 256))
        ticks = iter([0.0, 0.0040, 1.0, 1.0048, 2.0, 2.0044])
        timing = benchmark(f, x, repeats=3, pipeline=4, clock=ticks.__next__)
        print(timing)
        #> 1.10 ms ± 0.10 ms (median ± IQR of 3 × 4 pipelined calls)
        ```
    """
    if not callable(fn):
        raise TypeError(f"benchmark needs a function to call first, got {fn!r}.")
    if not callable(clock):
        raise TypeError(
            f"clock must be a function that returns the time in seconds, such as "
            f"time.perf_counter, got {clock!r}; to replay fixed times pass iter(times).__next__."
        )
    if not is_whole(warmup) or warmup < 0:
        raise ValueError(
            f"warmup must be a whole number of untimed calls, 0 or more, got {warmup!r}; keep "
            f"the default warmup=2 so that compilation is not timed, or pass warmup=0 to time "
            f"the first call, compilation included."
        )
    if not is_whole(repeats) or repeats < 1:
        raise ValueError(
            f"repeats must be a whole number of timed calls, 1 or more, got {repeats!r}; pass "
            f"for example repeats=10."
        )
    if not is_whole(pipeline) or pipeline < 1:
        raise ValueError(
            f"pipeline must be a whole number of calls dispatched before waiting, 1 or more, "
            f"got {pipeline!r}; pass pipeline=1 to time each call alone (latency), or for "
            f"example pipeline=8 to time calls dispatched back to back (throughput)."
        )
    warmup, repeats, pipeline = int(warmup), int(repeats), int(pipeline)
    for _ in range(warmup):
        jax.block_until_ready(_call(fn, args, kwargs))
    times = []
    for run in range(repeats):
        start = _read(clock, 2 * run, repeats)
        jax.block_until_ready([_call(fn, args, kwargs) for _ in range(pipeline)])
        times.append((_read(clock, 2 * run + 1, repeats) - start) / pipeline)
    if min(times) < 0:
        raise ValueError(
            f"the clock went backwards: a call took {min(times)!r} s. Use a monotonic clock "
            f"such as time.perf_counter."
        )
    if max(times) == 0:
        raise ValueError(
            f"the clock {clock!r} did not move: every timed call took 0 s by it. Use a clock "
            f"that advances, such as time.perf_counter (a coarse one cannot time short "
            f"calls: time more calls per reading with pipeline=n)."
        )
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    return Timing(
        median_s=float(median),
        best_s=min(times),
        worst_s=max(times),
        iqr_s=float(q3 - q1),
        repeats=repeats,
        times_s=tuple(times),
        pipeline=pipeline,
    )


def _read(clock: Callable[[], float], reading: int, repeats: int) -> float:
    """The time ``clock`` gives, its ``reading``-th time (from 0) of ``2 * repeats``."""
    try:
        value = clock()
    except StopIteration:
        raise ValueError(
            f"the clock {clock!r} ran out after {reading} readings: benchmark reads it "
            f"before and after each of the {repeats} timed calls or runs, {2 * repeats} "
            f"readings in all (warmup calls read none). Give it {2 * repeats} times, or leave "
            f"clock out to measure with time.perf_counter."
        ) from None
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(
            f"the clock {clock!r} returned {value!r} at reading {reading + 1}, but a clock "
            f"must return the time in seconds as a finite number, as time.perf_counter does."
        )
    return float(value)


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return fn(*args, **kwargs)
    except RuntimeError as error:
        if "has been deleted" not in str(error):
            raise
        raise RuntimeError(
            f"benchmark calls {getattr(fn, '__name__', fn)!r} again and again with the same "
            f"arguments, but an earlier call deleted one of them ({error}): the function "
            f"donates its inputs. Time it jitted without donate_argnums/donate_argnames, or "
            f"time a loop that passes each call's outputs to the next."
        ) from error
