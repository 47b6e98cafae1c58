"""Reading a ``jax.profiler.trace`` without a viewer: which operations ran, on which device, for how long.

``jax.profiler.trace(folder, create_perfetto_trace=True)`` writes a Chrome-format trace
(gzip-compressed JSON) that Perfetto and XProf open. The same file is plain data: each XLA
operation that ran on a device is an event with its HLO name (``args.hlo_op``), its
compiled module (``args.hlo_module``), its start and duration in microseconds, and on CPU
the device it ran for (``args.device_ordinal``). This module reads those events, sums them
per operation and device, and draws them as a small SVG timeline, with nothing but the
standard library.

Tested on XLA:CPU traces, where one event is one run of one HLO instruction on one device.
GPU and TPU traces are read by the same rules (``/device:GPU:N`` processes), but that is
tested only on hand-written traces: there the device events are kernels on stream lines,
one HLO operation can launch several (library calls, NCCL) or none (a ``-done``), and
collectives fused under other names are not recognised by :data:`COLLECTIVE`. Read counts
and shares from such traces with that in mind.

The JSON file is read rather than ``jax.profiler.ProfileData`` (``with
jax.profiler.trace(None) as session: session.profile_data``) because, in jaxlib 0.12.0.1,
reading an event's ``stats`` there emits a ``DeprecationWarning`` that aborts a process
run with ``-W error::DeprecationWarning``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from jaxpar._checks import is_whole, shown

COLLECTIVE = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute"
    r"|collective-broadcast)(-start|-done)?(\.\d+)?$"
)
"""HLO names of collective operations, in their synchronous form (``all-reduce.3``) and in
the asynchronous pairs that GPU and TPU pipelines emit (``all-reduce-start``, ``-done``)."""

_DEVICE_PROCESS = re.compile(r"/device:[A-Z]+:(\d+)")
_METADATA = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*\bmetadata=\{[^}]*\bop_name=\"([^\"]*)\"")


@dataclass(frozen=True)
class Operation:
    """One run of one XLA operation on one device, as the trace recorded it."""

    name: str
    """The HLO name of the operation, as in the compiled program: ``"all-reduce.3"``."""
    device: int
    """The device it ran for: its ``device_ordinal`` (on CPU), or the N of the trace's
    ``/device:GPU:N`` process it was filed under."""
    module: str
    """The compiled program it belongs to: ``"jit_train_step"`` for ``jax.jit(train_step)``."""
    start_us: float
    """When it started, in microseconds from the start of the trace."""
    duration_us: float
    """How long it took, in microseconds, waiting included (for a collective: for the
    other devices to arrive; on a shared CPU: for a core)."""
    run: str
    """Which execution of the program it belongs to (``args.run_id``); ``""`` if not recorded."""

    @property
    def collective(self) -> bool:
        """Whether it is a collective: an all-reduce, all-gather, reduce-scatter, ..."""
        return COLLECTIVE.match(self.name) is not None


@dataclass(frozen=True)
class TraceStep:
    """A step marked with ``jax.profiler.StepTraceAnnotation(name, step_num=...)``."""

    name: str
    """The annotation's name: ``"train"``."""
    number: int
    """Its ``step_num``."""
    start_us: float
    """When the annotated Python block started, in microseconds."""
    duration_us: float
    """How long the Python block took: the dispatch, not necessarily the device's work."""


@dataclass(frozen=True)
class Trace:
    """The device operations and steps of one trace file."""

    path: Path
    """The trace file that was read."""
    operations: tuple[Operation, ...]
    """Every XLA operation that ran on a device, sorted by start time."""
    steps: tuple[TraceStep, ...]
    """The steps marked with ``jax.profiler.StepTraceAnnotation``, sorted by start time."""

    @property
    def devices(self) -> tuple[int, ...]:
        """The devices that ran at least one operation, sorted."""
        return tuple(sorted({op.device for op in self.operations}))

    @property
    def runs(self) -> tuple[str, ...]:
        """The program executions (``run`` ids), in the order they started."""
        return tuple(dict.fromkeys(op.run for op in self.operations))

    @property
    def span_us(self) -> float:
        """From the start of the first operation to the end of the last, in microseconds."""
        return max(op.start_us + op.duration_us for op in self.operations) - min(
            op.start_us for op in self.operations
        )

    @property
    def busy_us(self) -> float:
        """The durations of all operations on all devices, summed, in microseconds."""
        return sum(op.duration_us for op in self.operations)


@dataclass(frozen=True)
class OperationTotal:
    """The time one operation took over all its runs, from :func:`top_operations`."""

    name: str
    """The HLO name of the operation."""
    count: int
    """How many times it ran (on the devices summed over)."""
    total_us: float
    """Its durations, summed, in microseconds."""
    share: float
    """Its part of the time of all operations on the same devices, from 0 to 1."""
    collective: bool
    """Whether it is a collective."""


def find_trace_file(folder: str | os.PathLike[str]) -> Path:
    """The trace file that ``jax.profiler.trace(folder)`` wrote last.

    ``jax.profiler.trace`` writes each run into ``folder/plugins/profile/<date>/``: a
    ``<host>.trace.json.gz`` and a ``<host>.xplane.pb`` for XProf, plus, with
    ``create_perfetto_trace=True``, a ``perfetto_trace.json.gz`` for Perfetto. Both JSON
    files hold the same events; this returns the Perfetto one when the newest run has it.

    Args:
        folder: the folder given to ``jax.profiler.trace``, or a trace file itself.

    Returns:
        The path of the trace file.

    Raises:
        TypeError: ``folder`` is not a path.
        FileNotFoundError: ``folder`` does not exist or holds no trace.
    """
    path = _path(folder, "find_trace_file")
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(
            f"no trace at {str(path)!r}: it does not exist. Pass the folder you gave to "
            f"jax.profiler.trace(folder), or a .trace.json.gz file."
        )
    files = sorted(
        path.rglob("*trace.json.gz"),
        key=lambda f: (f.stat().st_mtime_ns, f.name == "perfetto_trace.json.gz"),
    )
    if not files:
        raise FileNotFoundError(
            f"no trace in {str(path)!r}: it holds no *.trace.json.gz file. Record one with "
            f"`with jax.profiler.trace({str(path)!r}, create_perfetto_trace=True): ...` "
            f"and pass the same folder."
        )
    newest = files[-1].parent
    perfetto = newest / "perfetto_trace.json.gz"
    return perfetto if perfetto.exists() else files[-1]


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read the device operations and the annotated steps of a trace.

    Args:
        path: the folder given to ``jax.profiler.trace`` (its newest trace is read; see
            :func:`find_trace_file`), or a ``.trace.json.gz`` or ``.json`` file.

    Returns:
        The :class:`Trace`.

    Raises:
        TypeError: ``path`` is not a path.
        FileNotFoundError: there is no trace at ``path``.
        ValueError: the file is not a trace, or no operation ran on a device while it
            was recorded.

    Examples:
        Record two calls of a jitted function, then read what ran on the device:

        ```python
        import tempfile

        import jax
        import jax.numpy as jnp

        from jaxpar import read_trace

        f = jax.jit(lambda x: jnp.sin(x) * 2)
        x = jnp.ones(1000)
        f(x).block_until_ready()  # compile outside the trace
        with tempfile.TemporaryDirectory() as folder:
            with jax.profiler.trace(folder, create_perfetto_trace=True):
                f(x)
                f(x).block_until_ready()  # wait, so that the device work is in the trace
            trace = read_trace(folder)
        print(trace.path.name)
        #> perfetto_trace.json.gz
        print(trace.devices, len(trace.runs))
        #> (0,) 2
        print({op.module for op in trace.operations})
        #> {'jit__lambda'}
        ```
    """
    file = find_trace_file(_path(path, "read_trace"))
    opener = gzip.open if file.name.endswith(".gz") else open
    try:
        with opener(file, "rt", encoding="utf-8") as stream:
            data = json.load(stream)
        events = data["traceEvents"] if isinstance(data, dict) else data
        if not isinstance(events, list):
            raise TypeError(type(events).__name__)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{str(file)!r} is not a trace in the Chrome trace format ({error}); pass a "
            f"file that jax.profiler.trace wrote, or its folder."
        ) from error
    processes = {
        event.get("pid"): str(event.get("args", {}).get("name", ""))
        for event in events
        if isinstance(event, dict)
        and event.get("ph") == "M"
        and event.get("name") == "process_name"
    }
    operations, steps = [], []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        args = event.get("args") or {}
        if "hlo_op" in args:
            device = _device_of(args, processes.get(event.get("pid"), ""))
            if device is None:
                continue
            operations.append(
                Operation(
                    name=str(args["hlo_op"]),
                    device=device,
                    module=str(args.get("hlo_module", "")),
                    start_us=float(event["ts"]),
                    duration_us=float(event.get("dur", 0.0)),
                    run=str(args.get("run_id", "")),
                )
            )
        elif "step_num" in args:
            steps.append(
                TraceStep(
                    name=str(event.get("name", "")),
                    number=int(args["step_num"]),
                    start_us=float(event["ts"]),
                    duration_us=float(event.get("dur", 0.0)),
                )
            )
    if not operations:
        raise ValueError(
            f"the trace {str(file)!r} holds no operation that ran on a device. Run the "
            f"jitted code inside the `with jax.profiler.trace(...)` block, and wait for its "
            f"result there (jax.block_until_ready) so that the device work is recorded "
            f"before the trace stops."
        )
    operations.sort(key=lambda op: (op.start_us, op.device))
    steps.sort(key=lambda step: step.start_us)
    return Trace(path=file, operations=tuple(operations), steps=tuple(steps))


def _path(folder: object, function: str) -> Path:
    """``folder`` as a ``Path``, or a TypeError that says what ``function`` needs."""
    if not isinstance(folder, str | os.PathLike):
        raise TypeError(
            f"{function} needs the folder given to jax.profiler.trace(folder), or a trace "
            f"file, as a str or a pathlib.Path; got {folder!r}."
        )
    return Path(folder)


def _operations(operations: object, function: str) -> list[Operation]:
    """The operations of a Trace, or ``operations`` as a list, checked to be operations."""
    if isinstance(operations, Trace):
        return list(operations.operations)
    path = isinstance(operations, str | bytes | os.PathLike)
    if isinstance(operations, Iterable) and not path:
        listed = list(operations)
        wrong = [op for op in listed if not isinstance(op, Operation)]
        if not wrong:
            return listed
        got = f"a {type(operations).__name__} that holds {shown(wrong[0])}"
    elif path:
        got = f"the path {operations!r}; read the trace first: {function}(read_trace(path))"
    else:
        got = shown(operations)
    raise TypeError(
        f"{function} needs a Trace, such as read_trace(folder) returns, or a list of its "
        f"operations (jaxpar.Operation), got {got}."
    )


def _device_of(args: dict[str, Any], process: str) -> int | None:
    if "device_ordinal" in args:
        return int(args["device_ordinal"])
    match = _DEVICE_PROCESS.search(process)
    return int(match[1]) if match else None


def top_operations(
    trace: Trace | Iterable[Operation], n: int | None = 10, *, device: int | None = None
) -> list[OperationTotal]:
    """The operations that took the most time, summed over their runs.

    Args:
        trace: a :class:`Trace`, or some of its operations (one step's, say).
        n: how many to return, at least 1; ``None`` for all.
        device: sum over this device's operations only; ``None`` sums over all devices
            (an operation that runs on 8 devices then counts 8 times per step).

    Returns:
        The totals, longest first (ties by name), each with its share of the time of all
        operations on the same devices.

    Raises:
        TypeError: ``trace`` is neither a :class:`Trace` nor operations.
        ValueError: ``n`` is not a positive whole number, or ``device`` ran no operation.

    Examples:
        Two steps of two operations on device 0, read from a hand-written trace:

        ```python
        from jaxpar import Operation, top_operations

        ops = [
            Operation("fusion.1", 0, "jit_step", 0.0, 30.0, "1"),
            Operation("all-reduce.2", 0, "jit_step", 30.0, 10.0, "1"),
            Operation("fusion.1", 0, "jit_step", 50.0, 50.0, "2"),
            Operation("all-reduce.2", 0, "jit_step", 100.0, 10.0, "2"),
        ]
        for op in top_operations(ops, device=0):
            print(f"{op.name}: {op.count} runs, {op.total_us:.0f} µs, {op.share:.0%}")
            #> fusion.1: 2 runs, 80 µs, 80%
            #> all-reduce.2: 2 runs, 20 µs, 20%
        ```
    """
    if n is not None and (not is_whole(n) or n < 1):
        raise ValueError(
            f"n must be a whole number of operations, 1 or more, or None for all; got {n!r}."
        )
    operations = _operations(trace, "top_operations")
    if device is not None:
        devices = sorted({op.device for op in operations})
        operations = [op for op in operations if op.device == device]
        if not operations:
            raise ValueError(
                f"device {device!r} ran no operation in this trace; its devices are {devices}."
            )
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for op in operations:
        totals[op.name] += op.duration_us
        counts[op.name] += 1
    everything = sum(totals.values()) or 1.0
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    return [
        OperationTotal(
            name=name,
            count=counts[name],
            total_us=totals[name],
            share=totals[name] / everything,
            collective=COLLECTIVE.match(name) is not None,
        )
        for name in ranked[:n]
    ]


def operation_scopes(compiled: Any) -> dict[str, str]:
    """Each operation of a compiled program, mapped to the JAX code it came from.

    A trace names operations as the compiled program does (``fusion.3``, ``dot.4``). The
    program's text keeps, for each, the ``op_name`` of the JAX operation it was made from,
    with the ``jax.named_scope`` names around it: ``"jit(step)/jvp(hidden)/dot_general"``
    is the forward pass of the scope ``hidden``, ``"jit(step)/transpose(jvp(hidden))/..."``
    its backward pass.

    Args:
        compiled: ``jitted.lower(*args).compile()``, or the text of a compiled program
            (``compiled.as_text()``).

    Returns:
        ``{operation name: op_name}`` for every operation that carries an ``op_name``.

    Raises:
        TypeError: ``compiled`` is neither a compiled program nor its text.

    Examples:
        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import operation_scopes

        # jax.named_call names a function the way `with jax.named_scope(...)` names a block
        f = jax.jit(jax.named_call(lambda x: x * 2.0, name="scale"))
        scopes = operation_scopes(f.lower(jnp.ones(4)).compile())
        print(sorted(set(scopes.values())))
        #> ['jit(<lambda>)/scale/mul', 'x']
        ```
    """
    text = compiled if isinstance(compiled, str) else getattr(compiled, "as_text", None)
    text = text() if callable(text) else text
    if not isinstance(text, str):
        raise TypeError(
            f"operation_scopes needs a compiled program (jitted.lower(...).compile()) or its "
            f"text, got {type(compiled).__name__}."
        )
    return {match[1]: match[2] for line in text.splitlines() if (match := _METADATA.match(line))}


# Paul Tol's colour-blind safe "bright" palette: blue for matrix products, red for
# collectives, grey for the rest (the three are told apart by the legend, not by hue alone).
_COLOURS = {"matmul": "#4477AA", "collective": "#EE6677", "other": "#BBBBBB"}
_MATMUL = re.compile(r"(^|_)(dot|convolution|gemm|cublas|ynn_fusion|matmul)")


def _kind(op: Operation) -> str:
    if op.collective:
        return "collective"
    return "matmul" if _MATMUL.search(op.name) else "other"


def timeline_svg(
    operations: Trace | Iterable[Operation],
    *,
    width: int = 720,
    row_height: int = 22,
    title: str = "Device operations over time",
) -> str:
    """Draw operations as a timeline: one row per device, one bar per operation.

    Bars are blue for matrix products (``dot``, and XLA:CPU's ``ynn_fusion``), red for
    collectives, grey for everything else; each bar's tooltip gives its name and duration.
    The drawing is the same kind of picture as Perfetto's or XProf's trace viewer, reduced
    to the device operations and grouped by device rather than by thread.

    Args:
        operations: a :class:`Trace`, or some of its operations (one step's, say).
        width: the drawing's width in pixels, at least 240.
        row_height: each device row's height in pixels, at least 8.
        title: the accessible title and the caption of the drawing.

    Returns:
        The SVG markup, to write to a ``.svg`` file or put in a page.

    Raises:
        TypeError: ``operations`` is neither a :class:`Trace` nor operations.
        ValueError: there are no operations, or ``width`` or ``row_height`` is too small.

    Examples:
        ```python
        from jaxpar import Operation, timeline_svg

        ops = [
            Operation("ynn_fusion.2", 0, "jit_step", 0.0, 30.0, "1"),
            Operation("all-reduce.3", 0, "jit_step", 30.0, 10.0, "1"),
            Operation("ynn_fusion.2", 1, "jit_step", 5.0, 20.0, "1"),
            Operation("all-reduce.3", 1, "jit_step", 25.0, 15.0, "1"),
        ]
        svg = timeline_svg(ops, title="One step on two devices")
        print(svg.count("<rect class="), svg.count(">device "))
        #> 4 2
        ```
    """
    ops = _operations(operations, "timeline_svg")
    if not ops:
        raise ValueError("there are no operations to draw; pass a Trace or a non-empty list.")
    if not is_whole(width) or width < 240:
        raise ValueError(f"width must be a whole number of pixels, 240 or more, got {width!r}.")
    if not is_whole(row_height) or row_height < 8:
        raise ValueError(
            f"row_height must be a whole number of pixels, 8 or more, got {row_height!r}."
        )
    devices = sorted({op.device for op in ops})
    start = min(op.start_us for op in ops)
    span = max(op.start_us + op.duration_us for op in ops) - start or 1.0
    label, top = 72, 28
    plot = width - label - 8
    height = top + row_height * len(devices) + 46
    scale = plot / span
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="jaxpar-timeline" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'aria-labelledby="timeline-title" font-family="sans-serif" font-size="12" '
        f'fill="#222222" style="max-width: 100%; height: auto">',
        f'<title id="timeline-title">{escape(title)}: {len(ops)} operations on '
        f"{len(devices)} devices over {span / 1000:.1f} ms</title>",
        # A white card, so that the drawing reads the same on a dark page.
        f'<rect width="{width}" height="{height}" fill="#FFFFFF"/>',
        f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    for row, device in enumerate(devices):
        y = top + row * row_height
        parts.append(
            f'<text x="{label - 6}" y="{y + row_height * 0.7:.1f}" text-anchor="end">'
            f"device {device}</text>"
        )
        parts.append(
            f'<line x1="{label}" x2="{label + plot}" y1="{y + row_height / 2:.1f}" '
            f'y2="{y + row_height / 2:.1f}" stroke="#DDDDDD"/>'
        )
    for op in sorted(ops, key=lambda op: (op.device, op.start_us)):
        x = label + (op.start_us - start) * scale
        y = top + devices.index(op.device) * row_height + 2
        w = max(op.duration_us * scale, 0.1)
        tip = f"{op.name} on device {op.device}: {op.duration_us / 1000:.3f} ms"
        parts.append(
            f'<rect class="{_kind(op)}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
            f'height="{row_height - 4}" fill="{_COLOURS[_kind(op)]}">'
            f"<title>{escape(tip)}</title></rect>"
        )
    axis = top + row_height * len(devices) + 14
    parts.append(f'<text x="{label}" y="{axis}">0 ms</text>')
    parts.append(
        f'<text x="{label + plot}" y="{axis}" text-anchor="end">{span / 1000:.1f} ms</text>'
    )
    legend_y = axis + 20
    x = label
    for kind, text in (
        ("matmul", "matrix product"),
        ("collective", "collective"),
        ("other", "other"),
    ):
        parts.append(
            f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{_COLOURS[kind]}"/>'
        )
        parts.append(f'<text x="{x + 16}" y="{legend_y}">{text}</text>')
        x += 40 + 8 * len(text)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
