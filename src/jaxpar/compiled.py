"""What a compiled JAX program costs: its memory on each device and the collectives it runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import jax

COLLECTIVE_KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
    "collective-broadcast",
)
"""The HLO opcodes counted as collectives; each also in its asynchronous ``-start`` form."""

# One HLO instruction: `  [ROOT ]%name = <result type> <opcode>(<operands>), <attributes>`.
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?(?P<name>[\w.-]+)\s*=\s*(?P<rest>.*)$")
# What a computation calls: fusions, reductions, loop bodies and conditions, branches.
_CALLEE = re.compile(
    r"\b(?:calls|to_apply|body|condition)=%?([\w.-]+)|"
    r"\b(?:branch_computations|called_computations)=\{([^}]*)\}"
)
_WHILE_PARTS = re.compile(r"\b(?:body|condition)=%?([\w.-]+)")
_ARRAY_TYPE = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_BITS = {"pred": 8, "bf16": 16, "c64": 64, "c128": 128, "token": 0}


@dataclass(frozen=True)
class Collective:
    """One collective operation in a compiled program."""

    kind: str
    """Its opcode without the ``-start`` suffix: ``"all-reduce"``, ``"all-gather"``, …"""
    name: str
    """The name of the HLO instruction, such as ``"all-reduce.3"``."""
    result_bytes: int
    """The size of its result on each device (of all its results, for a tuple)."""
    in_loop: bool
    """Whether it sits in the body of a loop (``lax.scan``, ``fori_loop``, ``while_loop``),
    where it runs once per iteration instead of once per call."""
    asynchronous: bool
    """Whether it is an asynchronous ``-start``/``-done`` pair, as GPU and TPU compilers
    emit; XLA:CPU emits the synchronous forms."""


@dataclass(frozen=True)
class CompiledSummary:
    """The memory a compiled program needs on each device, and the collectives it runs.

    The sizes come from ``compiled.memory_analysis()`` and are ``None`` on a backend that
    does not report them.
    """

    argument_bytes: int | None
    """The inputs of one call, on one device."""
    output_bytes: int | None
    """The outputs of one call, on one device."""
    alias_bytes: int | None
    """Outputs written into the memory of donated inputs (``donate_argnums``)."""
    temp_bytes: int | None
    """Intermediate values (activations, gradients before they are returned, …)."""
    generated_code_bytes: int | None
    """The compiled code itself."""
    flops: float | None
    """Floating-point operations per call, as XLA's cost analysis counts them (a loop
    body is counted once, whatever the number of iterations); ``None`` if not reported."""
    collectives: tuple[Collective, ...]
    """Every collective in the program, in the order of the HLO text."""

    @property
    def total_bytes(self) -> int | None:
        """Arguments + outputs − aliased + temporaries: what one call holds on a device at
        most, counting every temporary as live at once. Note that
        ``memory_analysis().peak_memory_in_bytes`` leaves the temporaries out on XLA:CPU."""
        parts = (self.argument_bytes, self.output_bytes, self.alias_bytes, self.temp_bytes)
        if any(part is None for part in parts):
            return None
        arguments, outputs, aliased, temporaries = parts
        return arguments + outputs - aliased + temporaries

    def counts(self, *, in_loop: bool | None = None) -> dict[str, int]:
        """How many collectives of each kind, sorted by kind.

        Args:
            in_loop: ``True`` counts only those in loop bodies, ``False`` only those
                outside, ``None`` (the default) all of them.
        """
        return {kind: count for kind, (count, _) in self.by_kind(in_loop=in_loop).items()}

    def by_kind(self, *, in_loop: bool | None = None) -> dict[str, tuple[int, int]]:
        """``{kind: (count, result bytes)}`` of the collectives, sorted by kind.

        Args:
            in_loop: as in :meth:`counts`.
        """
        if in_loop is not None and not isinstance(in_loop, bool):
            raise TypeError(f"in_loop must be True, False or None, got {in_loop!r}.")
        found: dict[str, tuple[int, int]] = {}
        for collective in self.collectives:
            if in_loop is None or collective.in_loop == in_loop:
                count, size = found.get(collective.kind, (0, 0))
                found[collective.kind] = (count + 1, size + collective.result_bytes)
        return dict(sorted(found.items()))

    def __str__(self) -> str:
        """A few lines: the memory parts, then each kind of collective."""

        def size(value: int | None) -> str:
            return "not reported" if value is None else f"{value:,} B"

        lines = [
            f"arguments    {size(self.argument_bytes)}",
            f"outputs      {size(self.output_bytes)}",
            f"aliased      {size(self.alias_bytes)}",
            f"temporaries  {size(self.temp_bytes)}",
        ]
        for in_loop in (False, True):
            where = " in a loop" if in_loop else ""
            for kind, (count, total) in self.by_kind(in_loop=in_loop).items():
                lines.append(f"{kind} x{count}{where}: {total:,} B")
        if not self.collectives:
            lines.append("no collectives")
        return "\n".join(lines)


def summarise(compiled: jax.stages.Compiled) -> CompiledSummary:
    """Summarise a compiled program: its memory per device and its collectives.

    Reads ``compiled.memory_analysis()`` (argument, output, aliased and temporary bytes),
    ``compiled.cost_analysis()`` (flops) and the optimised HLO of ``compiled.as_text()``,
    in which it finds every collective, under its synchronous name (``all-reduce``) or its
    asynchronous one (``all-reduce-start``, whose ``-done`` half is not counted again),
    with the size of its result and whether it sits in a loop body. What XLA emits
    depends on the backend: on XLA:CPU a gradient sum is an ``all-reduce`` where GPU and
    TPU compilers often emit a ``reduce-scatter``, and they emit asynchronous pairs.

    Args:
        compiled: a compiled program, ``jax.jit(f).lower(*args).compile()``.

    Returns:
        The :class:`CompiledSummary`; ``str()`` of it is a short report.

    Raises:
        TypeError: ``compiled`` is not a compiled program: a function, a jitted function
            not yet lowered, or a lowered one not yet compiled. The message says which
            call is missing.

    Examples:
        A sum over a batch split across the 8 devices: each device adds its rows, then one
        all-reduce adds the partial sums.

        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import summarise

        mesh = jax.make_mesh((8,), ("data",))
        x = jax.device_put(jnp.ones((64, 32)), jax.NamedSharding(mesh, jax.P("data")))
        with jax.set_mesh(mesh):
            compiled = jax.jit(lambda x: x.sum(axis=0)).lower(x).compile()
        summary = summarise(compiled)
        print(summary.argument_bytes, summary.output_bytes)  # per device: 8 rows in, 32 out
        #> 1024 128
        print(summary.counts())
        #> {'all-reduce': 1}
        ```

        A collective in a loop body runs once per iteration; ``in_loop`` tells them apart:

        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import summarise

        mesh = jax.make_mesh((8,), ("data",))
        x = jax.device_put(jnp.ones((4, 64)), jax.NamedSharding(mesh, jax.P(None, "data")))

        def total_per_row(x):
            return jax.lax.scan(lambda carry, row: (carry, row.sum()), 0.0, x)[1]

        with jax.set_mesh(mesh):
            compiled = jax.jit(total_per_row).lower(x).compile()
        summary = summarise(compiled)
        print(summary.counts(in_loop=True), summary.counts(in_loop=False))
        #> {'all-reduce': 1} {}
        ```
    """
    _check_compiled(compiled)
    memory = compiled.memory_analysis()
    return CompiledSummary(
        argument_bytes=_memory_part(memory, "argument_size_in_bytes"),
        output_bytes=_memory_part(memory, "output_size_in_bytes"),
        alias_bytes=_memory_part(memory, "alias_size_in_bytes"),
        temp_bytes=_memory_part(memory, "temp_size_in_bytes"),
        generated_code_bytes=_memory_part(memory, "generated_code_size_in_bytes"),
        flops=_flops(compiled),
        collectives=tuple(find_collectives(compiled.as_text())),
    )


def find_collectives(hlo: str) -> list[Collective]:
    """The collectives in the text of an optimised HLO module (``compiled.as_text()``).

    Most callers want :func:`summarise`; this is its parser, for HLO text saved earlier
    or dumped by XLA (``XLA_FLAGS=--xla_dump_to=...``).

    Args:
        hlo: the text of an HLO module, with its computations and their instructions.

    Returns:
        One :class:`Collective` per collective instruction, in the order of the text.

    Raises:
        TypeError: ``hlo`` is not a string.
        ValueError: ``hlo`` has no HLO computation in it.
    """
    if not isinstance(hlo, str):
        raise TypeError(
            f"find_collectives needs the HLO text of a compiled program (a str, as "
            f"compiled.as_text() returns), got {type(hlo).__name__}."
        )
    computations = _computations(hlo)
    if not computations:
        raise ValueError(
            "find_collectives found no HLO computation in the text it was given; pass the "
            "whole module, as compiled.as_text() returns it."
        )
    looped = _computations_in_loops(computations)
    done_bytes: dict[str, int] = {}  # an async -start's name -> the size of its -done result
    found: list[tuple[str, str, str, bool, bool]] = []
    for computation, instructions in computations.items():
        for name, rest in instructions:
            opcode, result_type = _opcode_and_type(rest)
            if opcode is None:
                continue
            if opcode.endswith("-done"):
                operand = re.search(r"-done\(\s*%?([\w.-]+)", rest)
                if operand:
                    done_bytes[operand.group(1)] = _type_bytes(result_type)
                continue
            kind = opcode.removesuffix("-start")
            if kind in COLLECTIVE_KINDS:
                asynchronous = opcode.endswith("-start")
                found.append((kind, name, result_type, computation in looped, asynchronous))
    return [
        Collective(
            kind=kind,
            name=name,
            result_bytes=done_bytes.get(name, _type_bytes(result_type))
            if asynchronous
            else _type_bytes(result_type),
            in_loop=in_loop,
            asynchronous=asynchronous,
        )
        for kind, name, result_type, in_loop, asynchronous in found
    ]


def _check_compiled(compiled: Any) -> None:
    if isinstance(compiled, jax.stages.Compiled):
        return
    if isinstance(compiled, jax.stages.Lowered):
        remedy = "compile it first: summarise(lowered.compile())"
        raise TypeError(f"summarise needs a compiled program, got a lowered one; {remedy}.")
    if isinstance(compiled, jax.stages.Traced):
        remedy = "lower and compile it first: summarise(traced.lower().compile())"
        raise TypeError(f"summarise needs a compiled program, got a traced one; {remedy}.")
    if hasattr(compiled, "lower") and callable(compiled):
        raise TypeError(
            f"summarise needs a compiled program, got the jitted function "
            f"{_name(compiled)}, which is compiled only for the arguments it is called "
            f"with; compile it for example arguments: summarise(f.lower(*args).compile())."
        )
    if callable(compiled):
        raise TypeError(
            f"summarise needs a compiled program, got the function {_name(compiled)}; "
            f"jit and compile it for example arguments: "
            f"summarise(jax.jit(f).lower(*args).compile())."
        )
    raise TypeError(
        f"summarise needs a compiled program, jax.jit(f).lower(*args).compile(), got "
        f"{type(compiled).__name__} {compiled!r:.60}."
    )


def _name(function: Any) -> str:
    return repr(getattr(function, "__name__", None) or function)


def _memory_part(memory: Any, field: str) -> int | None:
    value = getattr(memory, field, None) if memory is not None else None
    return None if value is None else int(value)


def _flops(compiled: jax.stages.Compiled) -> float | None:
    try:
        costs = compiled.cost_analysis()
    except Exception:  # some backends raise instead of returning nothing
        return None
    if isinstance(costs, list | tuple):  # older JAX: one dict per program
        costs = costs[0] if costs else None
    if not isinstance(costs, dict) or "flops" not in costs:
        return None
    return float(costs["flops"])


def _computations(hlo: str) -> dict[str, list[tuple[str, str]]]:
    """Computation name -> its instructions, as (name, text after the `=`)."""
    computations: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in hlo.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            header = line.removeprefix("ENTRY ").strip()
            name = header.split()[0].lstrip("%") if header else ""
            current = computations.setdefault(name, [])
        elif line.startswith("}"):
            current = None
        elif current is not None and (match := _INSTRUCTION.match(line)):
            current.append((match["name"], match["rest"]))
    return computations


def _computations_in_loops(computations: dict[str, list[tuple[str, str]]]) -> set[str]:
    """The names of the computations that run inside a while loop, directly or not."""
    callees: dict[str, set[str]] = {}
    roots: set[str] = set()
    for computation, instructions in computations.items():
        called = callees.setdefault(computation, set())
        for _, rest in instructions:
            for single, several in _CALLEE.findall(rest):
                called.update([single] if single else re.findall(r"%?([\w.-]+)", several))
            if _opcode_and_type(rest)[0] == "while":
                roots.update(_WHILE_PARTS.findall(rest))
    looped, pending = set(), list(roots)
    while pending:
        computation = pending.pop()
        if computation not in looped:
            looped.add(computation)
            pending.extend(callees.get(computation, ()))
    return looped


def _opcode_and_type(rest: str) -> tuple[str | None, str]:
    """The opcode of an instruction and its result type, from the text after its `=`."""
    if rest.startswith("("):  # a tuple type: find its closing parenthesis
        depth = 0
        for index, character in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(character, 0)
            if depth == 0:
                result_type, remainder = rest[: index + 1], rest[index + 1 :]
                break
        else:
            return None, ""
    else:
        result_type, _, remainder = rest.partition(" ")
    match = re.match(r"\s*([a-z][\w-]*)\(", remainder)
    return (match.group(1) if match else None), result_type


def _type_bytes(result_type: str) -> int:
    """The bytes of an HLO type: `f32[64,64]{1,0}`, or the sum over a tuple of them."""
    total_bits = 0
    for dtype, dims in _ARRAY_TYPE.findall(result_type):
        bits = _BITS.get(dtype)
        if bits is None:
            width = re.match(r"[fsu](\d+)", dtype)
            bits = int(width.group(1)) if width else 0
        total_bits += bits * math.prod(int(d) for d in dims.split(",") if d)
    return (total_bits + 7) // 8
