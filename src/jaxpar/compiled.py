"""What a compiled JAX program costs: its memory on each device and the collectives it runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

COLLECTIVE_KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
    "collective-broadcast",
    "send",
    "recv",
)
"""The HLO opcodes counted as collectives; each also in its asynchronous ``-start`` form.
``send`` and ``recv`` are point-to-point halves, always paired with a ``-done``: XLA:GPU
turns large collective-permutes in loops into them."""

# One HLO instruction: `  [ROOT ]%name = <result type> <opcode>(<operands>), <attributes>`.
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?(?P<name>[\w.-]+)\s*=\s*(?P<rest>.*)$")
# What a computation calls: fusions, reductions, loop bodies and conditions, branches.
_CALLEE = re.compile(
    r"\b(?:calls|to_apply|body|condition)=%?([\w.-]+)|"
    r"\b(?:branch_computations|called_computations)=\{([^}]*)\}"
)
_WHILE_PARTS = re.compile(r"\b(?:body|condition)=%?([\w.-]+)")
_ARRAY_TYPE = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
# The devices each collective runs among, in the three forms XLA prints: a list of groups
# `{{0,1},{2,3}}`, an iota `[4,2]<=[2,4]T(1,0)` (4 groups of 2), or mesh axes
# `mesh['data'=2,'model'=4] {'data'}`; `{}` is every device.
_REPLICA_GROUPS = re.compile(
    r"\breplica_groups=(?:(?P<empty>\{\})|\{\{(?P<first>[\d,\s]*)\}|"
    r"\[(?P<iota>[\d,]+)\]<=\[(?P<reshape>[\d,]+)\](?:T\((?P<transpose>[\d,]+)\))?|"
    r"mesh\[(?P<mesh>[^\]]*)\]\s*\{(?P<axes>[^}]*)\})"
)
_NUM_PARTITIONS = re.compile(r"^HloModule\b.*?\bnum_partitions=(\d+)", re.MULTILINE)
# Bytes each device sends, as a multiple of its result's size, in a group of n devices,
# with the ring algorithms NCCL and XLA use for large messages.
_RING: dict[str, Any] = {
    "all-reduce": lambda size, n: 2 * size * (n - 1) // n,  # reduce-scatter + all-gather
    "all-gather": lambda size, n: size * (n - 1) // n,  # the result is the whole
    "reduce-scatter": lambda size, n: size * (n - 1),  # the input is n results
    "all-to-all": lambda size, n: size * (n - 1) // n,  # keeps its own 1/n
    "collective-broadcast": lambda size, n: size * (n - 1) // n,
}
_Groups = tuple[tuple[int, ...], ...]
_ARRAY_TYPE_NAMES = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[[0-9,]*\]")
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
    """Whether it is an asynchronous pair: a ``-start``/``-done``, a collective inside an
    ``async-start`` or a ``fusion-start`` (XLA:GPU), or one that XLA:TPU fuses with a
    matrix multiply (``async_collective_fusion``). XLA:CPU emits none. A pair lets the
    compiler place other work between its halves; whether it found any is not recorded
    here."""
    group_size: int | None = None
    """How many devices it runs among, from its ``replica_groups``; ``None`` where the
    HLO does not say (a ``collective-permute``, whose pairs are not groups)."""
    element_types: tuple[str, ...] = ()
    """The element types of its result, such as ``("bf16",)``: what goes over the wire,
    after the backend's own rewrites (XLA:CPU widens bfloat16 collectives to float32)."""
    runs: int | None = 1
    """How many times it runs per call of the program: 1 outside loops, the product of
    the trip counts of the loops around it inside them (XLA records a ``lax.scan``'s
    as ``known_trip_count``); ``None`` where a loop around it has no known count."""
    axes: tuple[str, ...] | None = None
    """The mesh axes it runs along, such as ``("data",)``: read from its device groups
    and the mesh of the program's arguments; ``None`` where no mesh is known or its
    groups are not whole axes (a ``collective-permute``, or a group that splits an axis)."""
    hosts: int | None = None
    """How many hosts (processes) the devices of its widest group, or of its widest
    source-target pair, sit on: 1 where it stays inside every host, 2 or more where its
    data crosses between hosts. Read from the ``process_index`` of the mesh's devices;
    ``None`` where no mesh of devices is known or the HLO names no groups. On GPUs the
    hosts are joined by the slow network (InfiniBand, Ethernet), the GPUs of a host by
    NVLink."""
    slices: int | None = None
    """The same for slices (``device.slice_index``): on TPUs the chips of a slice are
    joined by their own links (ICI), slices by the data-centre network (DCN), so this is
    the number to read there; a TPU slice may span several hosts. ``None`` also where the
    devices have no ``slice_index`` (CPU devices). For a transfer over DCN (:attr:`dcn`),
    whose groups the HLO does not name, the number of slices of the whole program."""
    dcn: str | None = None
    """For XLA:TPU's transfers between slices: the collective it is the DCN part of, such
    as ``"all-reduce"``. XLA:TPU splits a collective whose devices span slices into one
    over ICI within each slice and a ``send``/``recv`` pair over DCN between them, run by
    its DCN runtime ("megascale"); this is that pair's ``send`` or ``recv``. ``None``
    for every other collective."""

    @property
    def sent_bytes(self) -> int | None:
        """The bytes each device sends, by the ring algorithm's count for its kind and
        group size: an all-reduce of S bytes among n devices sends 2(n-1)/n x S, an
        all-gather (n-1)/n of its result, a reduce-scatter (n-1) x its result (the input
        is n results), an all-to-all (n-1)/n; a collective-permute sends its result once,
        a ``send`` its data and a ``recv`` nothing.
        ``None`` where the group size is unknown, and for ``ragged-all-to-all``, whose
        sizes are not in its type. A model of the traffic, not a measurement: tree and
        hierarchical algorithms, and a backend's own choices, send other amounts."""
        if self.kind in ("collective-permute", "send"):
            return self.result_bytes
        if self.kind == "recv":
            return 0
        ring = _RING.get(self.kind)
        if ring is None or self.group_size is None:
            return None
        return ring(self.result_bytes, self.group_size)


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
    peak_bytes: int | None = None
    """The backend's own peak (``peak_memory_in_bytes``), whose meaning differs: XLA:GPU
    counts the buffers alive at the worst moment, temporaries included; XLA:CPU leaves the
    temporaries out; XLA:TPU counts, besides its device memory (HBM), the buffers it places
    in the chip's on-chip vector memory (memory space ``S(1)`` in the HLO), which
    :attr:`temp_bytes` leaves out. For a device's main memory, read :attr:`total_bytes`."""

    @property
    def total_bytes(self) -> int | None:
        """Arguments + outputs − aliased + temporaries: what one call holds on a device at
        most. XLA packs the temporaries by their lifetimes already; the sum is an upper
        bound in that it adds the three parts as if all were alive at once. On XLA:CPU the
        temporaries leave out the buffers of library calls XLA hands whole subgraphs to
        (``ynn_fusion``), so read them as a lower bound there; on XLA:TPU they leave out
        what it keeps in on-chip memory, which is not the device memory this counts. Note that
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

    def by_group(
        self, *, in_loop: bool | None = None
    ) -> dict[tuple[str, int | None], tuple[int, int, int | None]]:
        """``{(kind, group size): (count, result bytes, sent bytes)}``, sorted by kind and
        group size: the collectives of each kind among groups of each size, the sizes of
        their results, and the bytes each device sends by the ring model of
        :attr:`Collective.sent_bytes` (``None`` if that is unknown for one of them).

        Args:
            in_loop: as in :meth:`counts`.
        """
        if in_loop is not None and not isinstance(in_loop, bool):
            raise TypeError(f"in_loop must be True, False or None, got {in_loop!r}.")
        found: dict[tuple[str, int | None], tuple[int, int, int | None]] = {}
        for collective in self.collectives:
            if in_loop is None or collective.in_loop == in_loop:
                key = (collective.kind, collective.group_size)
                count, size, sent = found.get(key, (0, 0, 0))
                more = collective.sent_bytes
                sent = None if sent is None or more is None else sent + more
                found[key] = (count + 1, size + collective.result_bytes, sent)
        return dict(sorted(found.items(), key=lambda item: (item[0][0], item[0][1] or 0)))

    def sent_bytes(self, *, across: str | None = None) -> int | None:
        """The bytes each device sends per call, by the ring model of
        :attr:`Collective.sent_bytes`, times each collective's :attr:`Collective.runs`.

        A collective whose group spans two hosts goes at the pace of the slowest link in
        it, the network between the hosts, for all its bytes: ``across="hosts"`` sums
        those, ``across="slices"`` those between TPU slices (for XLA:TPU, its transfers
        over DCN).

        Args:
            across: ``None`` for every collective, ``"hosts"`` for those spanning more
                than one host (:attr:`Collective.hosts`), ``"slices"`` for those spanning
                more than one slice (:attr:`Collective.slices`).

        Returns:
            The bytes; ``None`` where one of the collectives counted has no known size or
            run count, or where ``across`` is given and one has no known span (the
            program was summarised without a mesh of devices).

        Raises:
            ValueError: ``across`` is not ``None``, ``"hosts"`` or ``"slices"``.

        Examples:
            Two hosts of 8 H100s: a sum over the batch, split across all 16 GPUs, crosses
            the hosts; one split within each host does not.

            ```python
            import jax
            import jax.numpy as jnp

            from jaxpar import compile_for, summarise

            mesh = jax.sharding.AbstractMesh((2, 8), ("hosts", "gpus"))
            within = jax.NamedSharding(mesh, jax.P("gpus"))  # rows split over a host's GPUs
            x = jax.ShapeDtypeStruct((64, 1024), jnp.float32, sharding=within)
            summary = summarise(compile_for("h100-16", lambda x: x.sum(axis=0), x))
            print(summary.sent_bytes(), summary.sent_bytes(across="hosts"))
            #> 7168 0
            ```
        """
        if across not in (None, "hosts", "slices"):
            raise ValueError(
                f"across must be None, 'hosts' or 'slices', got {across!r}: "
                f"summary.sent_bytes(across='hosts') sums the collectives that span hosts."
            )
        total = 0
        for collective in self.collectives:
            if across is not None:
                spread = getattr(collective, across)
                if spread is None:
                    return None
                if spread < 2:
                    continue
            sent, runs = collective.sent_bytes, collective.runs
            if sent is None or runs is None:
                return None
            total += sent * runs
        return total

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
        collectives=tuple(find_collectives(compiled.as_text(), _mesh(compiled))),
        peak_bytes=_memory_part(memory, "peak_memory_in_bytes"),
    )


def find_collectives(hlo: str, mesh: jax.sharding.Mesh | None = None) -> list[Collective]:
    """The collectives in the text of an optimised HLO module (``compiled.as_text()``).

    Most callers want :func:`summarise`; this is its parser, for HLO text saved earlier
    or dumped by XLA (``XLA_FLAGS=--xla_dump_to=...``). It reads the forms of XLA:CPU,
    XLA:GPU and XLA:TPU: asynchronous ``-start``/``-done`` pairs, collectives that run
    inside an ``async-start`` or a ``fusion-start`` (XLA:GPU's collective kernels) or
    inside an ``async_collective_fusion`` (XLA:TPU overlapping one with a matrix
    multiply), and XLA:TPU's ``all-reduce-scatter`` fusion, an all-reduce whose result is
    sliced, counted as the reduce-scatter it is.

    Args:
        hlo: the text of an HLO module, with its computations and their instructions.
        mesh: the mesh the program's arguments are sharded on, to name the axes each
            collective runs along (:attr:`Collective.axes`) and count the hosts and
            slices it spans (:attr:`Collective.hosts`, :attr:`Collective.slices`);
            device ``i`` in the HLO's groups is the ``i``-th device of ``mesh.devices``
            in row-major order.

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
    runs = _runs_per_call(hlo, computations)
    wrapped = _computations_in_async_pairs(computations)
    scattered = _all_reduce_scatters(computations)
    partitions = _NUM_PARTITIONS.search(hlo)
    devices = int(partitions.group(1)) if partitions else None
    done_types: dict[str, str] = {}  # an async -start's name -> its -done's result type
    found: list[tuple[str, str, str, str, bool, _Groups | None, bool]] = []
    for computation, instructions in computations.items():
        for name, rest in instructions:
            opcode, result_type = _opcode_and_type(rest)
            if opcode is None:
                continue
            if opcode.endswith("-done"):
                operand = re.search(r"-done\(\s*%?([\w.-]+)", rest)
                if operand:
                    done_types[operand.group(1)] = result_type
                continue
            kind = opcode.removesuffix("-start")
            if kind in COLLECTIVE_KINDS:
                paired = opcode.endswith("-start") or kind in ("send", "recv")
                asynchronous = paired or computation in wrapped
                if kind == "all-reduce" and computation in scattered:
                    kind, result_type = "reduce-scatter", scattered[computation]
                groups = _groups(rest, devices)
                entry = (kind, name, result_type, computation, asynchronous, groups)
                found.append(entry + (paired,))
    found = _one_per_channel(found, computations)
    collectives = []
    texts: dict[str, str] = {}  # instruction name -> the text after its `=`, first seen
    for instructions in computations.values():
        for name, rest in instructions:
            texts.setdefault(name, rest)
    for kind, name, result_type, computation, asynchronous, groups, paired in found:
        group = groups[0] if groups else None
        spanned = groups or _pairs(texts.get(name, ""))
        dcn = re.search(r'_xla_megascale_transfer_type="(\w+)"', texts.get(name, ""))
        if kind in ("send", "recv"):  # (data, u32[] context, token[]): the data alone
            arrays = _ARRAY_TYPE.findall(result_type)
            result_type = "{}[{}]".format(*arrays[0]) if arrays else ""
        elif paired:  # the -start's tuple holds its operands too: read the -done's result
            result_type = done_types.get(name, result_type)
        collectives.append(
            Collective(
                kind=kind,
                name=name,
                result_bytes=_type_bytes(result_type),
                in_loop=computation in looped,
                asynchronous=asynchronous,
                group_size=None if group is None else len(group),
                element_types=tuple(dict.fromkeys(_ARRAY_TYPE_NAMES.findall(result_type))),
                runs=runs.get(computation, 1) if computation in looped else 1,
                axes=_axes(group, mesh),
                hosts=_spread(spanned, mesh, "process_index"),
                slices=_dcn_slices(texts[name], mesh)
                if dcn
                else _spread(spanned, mesh, "slice_index"),
                dcn=dcn[1].lower().replace("_", "-") if dcn else None,
            )
        )
    return collectives


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


def _mesh(compiled: jax.stages.Compiled) -> jax.sharding.Mesh | None:
    """The mesh of the program's first argument sharded on one, if any."""
    for sharding in jax.tree.leaves(compiled.input_shardings):
        if isinstance(sharding, jax.NamedSharding) and isinstance(sharding.mesh, jax.sharding.Mesh):
            return sharding.mesh
    return None


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


def _runs_per_call(
    hlo: str, computations: dict[str, list[tuple[str, str]]]
) -> dict[str, int | None]:
    """How many times each computation runs per call of the module: the sum over its
    callers of their runs, times a loop's trip count for its body (and that plus one for
    its condition); ``None`` where a trip count is unknown."""
    entry = re.search(r"^ENTRY\s+%?([\w.-]+)", hlo, re.MULTILINE)
    if entry is None:
        return {}
    edges: dict[str, list[tuple[str, int | None]]] = {}  # caller -> (callee, factor)
    for computation, instructions in computations.items():
        for _, rest in instructions:
            if _opcode_and_type(rest)[0] == "while":
                count = re.search(r'"known_trip_count":\{"n":"(\d+)"', rest)
                body = re.search(r"\bbody=%?([\w.-]+)", rest)
                condition = re.search(r"\bcondition=%?([\w.-]+)", rest)
                n = int(count.group(1)) if count else None
                if n is None and condition:
                    n = _counted_loop(rest, instructions, computations.get(condition.group(1), []))
                if body:
                    edges.setdefault(computation, []).append((body.group(1), n))
                if condition:
                    edges.setdefault(computation, []).append(
                        (condition.group(1), None if n is None else n + 1)
                    )
                continue
            for single, several in _CALLEE.findall(rest):
                for callee in [single] if single else re.findall(r"%?([\w.-]+)", several):
                    edges.setdefault(computation, []).append((callee, 1))
    order: list[str] = []  # callers before callees: the call graph of HLO has no cycles
    seen: set[str] = set()

    def visit(computation: str) -> None:
        if computation in seen:
            return
        seen.add(computation)
        for callee, _ in edges.get(computation, ()):
            visit(callee)
        order.append(computation)

    visit(entry.group(1))
    runs: dict[str, int | None] = {entry.group(1): 1}
    for computation in reversed(order):
        caller_runs = runs.get(computation, 0)
        for callee, factor in edges.get(computation, ()):
            before = runs.get(callee, 0)
            if caller_runs is None or factor is None or before is None:
                runs[callee] = None
            else:
                runs[callee] = before + caller_runs * factor
    return runs


def _one_per_channel(
    found: list[tuple[str, str, str, str, bool, _Groups | None, bool]],
    computations: dict[str, list[tuple[str, str]]],
) -> list[tuple[str, str, str, str, bool, _Groups | None, bool]]:
    """One entry per collective: XLA:TPU writes an asynchronous collective as clones of
    one instruction, with one ``channel_id``, in the fusion that starts it (whose root is
    a custom-call ``AsyncCollectiveStart``), in each ``async_collective_fusion`` that
    overlaps it with work, and in the fusion that waits for it (``AsyncCollectiveDone``).
    The clones are one collective; elsewhere, channel ids may repeat (XLA:CPU's loops)."""
    helpers = {
        name
        for name, instructions in computations.items()
        if any(
            re.search(r'custom_call_target="AsyncCollective(?:Start|Done)"', rest)
            for _, rest in instructions[-1:]
        )
    }
    channels = {
        name: channel.group(1)
        for instructions in computations.values()
        for name, rest in instructions
        if (channel := re.search(r"\bchannel_id=(\d+)", rest))
    }
    seen: set[tuple[str, str]] = set()
    result = []
    for entry in found:
        kind, name, computation = entry[0], entry[1], entry[3]
        if computation in helpers:
            continue  # a clone in the start or done fusion of an asynchronous collective
        if computation.startswith("async_collective_fusion") and name in channels:
            if (kind, channels[name]) in seen:
                continue  # one collective overlapped with several fusions' work
            seen.add((kind, channels[name]))
        result.append(entry)
    return result


def _counted_loop(
    loop: str, caller: list[tuple[str, str]], condition: list[tuple[str, str]]
) -> int | None:
    """The trip count of a loop XLA records none for (XLA:TPU), if its condition is
    ``i < N`` with a constant N and its counter starts at a constant 0: a ``lax.scan``
    or a ``fori_loop`` as JAX emits them; ``None`` for anything else."""
    named = dict(condition) | dict(caller)
    test = re.match(r"\S+\s+compare\(%?([\w.-]+),\s*%?([\w.-]+)\).*direction=LT", condition[-1][1])
    bound = re.match(r"s32\[\]\S*\s+constant\((\d+)\)", named.get(test[2], "")) if test else None
    counter = (
        re.search(r"get-tuple-element\(.*\bindex=(\d+)", named.get(test[1], "")) if test else None
    )
    start = re.search(r"\bwhile\(%?([\w.-]+)\)", loop)
    if not (bound and counter and start):
        return None
    operands = re.search(r"\btuple\(([^)]*)\)", named.get(start[1], ""))
    if operands is None:
        return None
    first = [o.strip().lstrip("%") for o in operands[1].split(",")][int(counter[1])]
    while copied := re.search(r"\bcopy\(%?([\w.-]+)\)", named.get(first, "")):
        first = copied[1]  # XLA:TPU copies the counter's first value into the loop
    zero = re.match(r"s32\[\]\S*\s+constant\(0\)", named.get(first, ""))
    return int(bound[1]) if zero else None


def _computations_in_async_pairs(computations: dict[str, list[tuple[str, str]]]) -> set[str]:
    """The computations whose collectives run asynchronously: those an ``async-start``
    or a ``fusion-start`` runs (XLA:GPU wraps reduce-scatters and all-to-alls in the
    first, its own collective kernels in the second), and XLA:TPU's
    ``async_collective_fusion`` s, which overlap a collective with a matrix multiply."""
    wrapped = {name for name in computations if name.startswith("async_collective_fusion")}
    for instructions in computations.values():
        for _, rest in instructions:
            if _opcode_and_type(rest)[0] in ("async-start", "fusion-start"):
                wrapped.update(re.findall(r"\bcalls=%?([\w.-]+)", rest))
    return wrapped


def _all_reduce_scatters(computations: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """XLA:TPU's reduce-scatters: a fusion calling ``%all-reduce-scatter…``, an all-reduce
    whose result each device slices. Maps the computation to the fusion's result type."""
    scatters = {}
    for instructions in computations.values():
        for _, rest in instructions:
            opcode, result_type = _opcode_and_type(rest)
            callee = re.search(r"\bcalls=%?(all-reduce-scatter[\w.-]*)", rest)
            if opcode == "fusion" and callee:
                scatters[callee.group(1)] = result_type
    return scatters


def _groups(rest: str, devices: int | None) -> _Groups | None:
    """The device groups of a collective, from the text after its `=`: all of the same
    size, and (on a mesh) along the same axes."""
    match = _REPLICA_GROUPS.search(rest)
    if match is None:
        return None
    if match["empty"]:
        return None if devices is None else (tuple(range(devices)),)
    if match["first"] is not None:
        listed = re.search(r"replica_groups=\{((?:\{[\d,\s]*\},?\s*)*)\}", rest)
        groups = tuple(
            tuple(int(d) for d in re.findall(r"\d+", group))
            for group in re.findall(r"\{([\d,\s]*)\}", listed[1] if listed else "")
        )
        if not groups or not groups[0]:  # {{}}: every device
            return None if devices is None else (tuple(range(devices)),)
        return groups
    if match["iota"]:  # [groups, size] <= [dims] T(permutation): an iota, transposed
        shape = [int(d) for d in match["iota"].split(",")]
        dims = [int(d) for d in match["reshape"].split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if match["transpose"]:
            ids = ids.transpose([int(d) for d in match["transpose"].split(",")])
        return tuple(tuple(int(d) for d in row) for row in ids.reshape(-1, shape[-1]))
    sizes = [(axis, int(size)) for axis, size in re.findall(r"'([^']+)'=(\d+)", match["mesh"])]
    named = set(re.findall(r"'([^']+)'", match["axes"])) or {axis for axis, _ in sizes}
    ids = np.arange(math.prod(size for _, size in sizes)).reshape([size for _, size in sizes])
    inner = [i for i, (axis, _) in enumerate(sizes) if axis in named]
    outer = [i for i, (axis, _) in enumerate(sizes) if axis not in named]
    size = math.prod(sizes[i][1] for i in inner)
    rows = ids.transpose(outer + inner).reshape(-1, size)
    return tuple(tuple(int(d) for d in row) for row in rows)


def _pairs(rest: str) -> _Groups | None:
    """The (source, target) pairs of a collective-permute, a send or a recv, from the text
    after its `=`."""
    match = re.search(
        r"\b_?(?:xla_send_recv_)?source_target_pairs=\"?\{((?:\{\d+,\d+\},?)*)\}", rest
    )
    if match is None:
        return None
    return tuple((int(a), int(b)) for a, b in re.findall(r"\{(\d+),(\d+)\}", match[1])) or None


def _dcn_slices(rest: str, mesh: Any) -> int | None:
    """The slices of the program of XLA:TPU's transfer between slices: those it names in
    ``_xla_megascale_target="{1,2}x{0:7}"`` (slices 1 and 2, chips 0 to 7 of each), or
    else those of the mesh (the target may list devices instead)."""
    target = re.search(r'_xla_megascale_target="\{([\d,\s]*)\}', rest)
    if target:
        return len(re.findall(r"\d+", target[1]))
    devices = getattr(mesh, "devices", None)
    if not isinstance(devices, np.ndarray):
        return None
    return _spread((tuple(range(devices.size)),), mesh, "slice_index")


def _spread(groups: _Groups | None, mesh: Any, attribute: str) -> int | None:
    """The most distinct values of ``attribute`` (``process_index``, ``slice_index``)
    among the mesh's devices in any one of ``groups``."""
    devices = getattr(mesh, "devices", None)
    if groups is None or not isinstance(devices, np.ndarray):
        return None
    flat = devices.reshape(-1)
    if not hasattr(flat[0], attribute) or max(max(g, default=0) for g in groups) >= flat.size:
        return None
    return max(len({getattr(flat[d], attribute) for d in group}) for group in groups)


def _axes(group: tuple[int, ...] | None, mesh: jax.sharding.Mesh | None) -> tuple[str, ...] | None:
    """The mesh axes along which the devices of ``group`` differ, if they are whole axes."""
    if group is None or mesh is None or max(group, default=0) >= mesh.size:
        return None
    shape = tuple(mesh.shape.values())
    positions = np.array(np.unravel_index(list(group), shape))
    axes = tuple(
        name for name, row in zip(mesh.axis_names, positions, strict=True) if len(set(row)) > 1
    )
    return axes if math.prod(mesh.shape[a] for a in axes) == len(group) else None


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
