"""Checking, before a collective, that every rank compiled the same program.

Ranks that run different programs do not fail cleanly: their collectives wait for each
other forever, abort with a message about sizes, or return different results on
different ranks without a word. Comparing the programs first, through a collective of a
fixed size that cannot itself disagree, turns all of these into one error that names the
ranks.
"""

from __future__ import annotations

import hashlib

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxpar._checks import shown

# What each rank sends: a digest of its program, then its argument shapes as text.
DIGEST_BYTES = 16
SIGNATURE_BYTES = 240


class ProgramMismatchError(RuntimeError):
    """The ranks compiled different programs: running them would hang or disagree."""


def check_same_program(
    program: jax.stages.Lowered | jax.stages.Compiled, name: str = "the program"
) -> None:
    """Raise in every rank if the ranks' programs differ; return if they are the same.

    Call it in every rank, with what ``jax.jit(f).lower(*args)`` (or ``.compile()``)
    gave, before running the program: it gathers a digest of each rank's program text
    and its argument shapes through one small collective. That collective has the same
    size in every rank, so it cannot hang or mix data however much the programs differ;
    like any collective, it hangs if a rank never calls it. Lowering costs a trace, not
    a compilation; check once per new shape, not every step. A lowered program is the
    StableHLO that JAX hands to XLA, so what differs only when XLA compiles it (an
    ``XLA_FLAGS`` set differently on some hosts) shows only in the compiled text, if at
    all.

    Examples:
        In every rank of a run started by ``python -m jaxpar.launch``; in one process, as
        here, there is nothing to compare:

        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import check_same_program

        loss = jax.jit(lambda x: jnp.mean(x**2))
        batch = jnp.ones((8, 2))
        lowered = loss.lower(batch)
        check_same_program(lowered, "the loss")  # in every rank, before running it
        print(lowered.compile()(batch))
        #> 1.0
        ```

    Args:
        program: a ``jax.stages.Lowered`` or ``jax.stages.Compiled``.
        name: what the error calls the program.

    Raises:
        ProgramMismatchError: the ranks' programs differ; the message lists the ranks
            of each program and the argument shapes each was compiled for.
        TypeError: ``program`` is neither lowered nor compiled.
    """
    if not isinstance(program, jax.stages.Lowered | jax.stages.Compiled):
        raise TypeError(
            f"check_same_program() takes what jax.jit(f).lower(*args) returns (or its "
            f".compile()), got {shown(program)}."
        )
    text = program.as_text()
    if not isinstance(text, str):  # a Compiled with no text (never on CPU, GPU or TPU)
        raise TypeError(f"check_same_program(): {name} has no program text to compare.")
    digest = hashlib.sha256(text.encode()).digest()[:DIGEST_BYTES]
    mine = np.zeros(DIGEST_BYTES + SIGNATURE_BYTES, np.uint8)
    mine[:DIGEST_BYTES] = np.frombuffer(digest, np.uint8)
    shape_text = signature(program).encode()[:SIGNATURE_BYTES]
    mine[DIGEST_BYTES : DIGEST_BYTES + len(shape_text)] = np.frombuffer(shape_text, np.uint8)
    if jax.process_count() == 1:
        return
    everyone = np.asarray(multihost_utils.process_allgather(mine))  # (processes, bytes)
    groups: dict[bytes, list[int]] = {}
    for rank, row in enumerate(everyone):
        groups.setdefault(row.tobytes(), []).append(rank)
    if len(groups) == 1:
        return
    lines = []
    for row, ranks in groups.items():
        shapes = row[DIGEST_BYTES:].rstrip(b"\0").decode(errors="replace")
        lines.append(f"  ranks {ranks}: arguments {shapes}")
    same_shapes = len({row[DIGEST_BYTES:] for row in groups}) == 1
    hint = (
        "The arguments agree, so the functions differ: a value read at trace time (a flag, "
        "an environment variable, jax.process_index()) that is not the same in every rank."
        if same_shapes
        else "Give every rank arguments of the same shapes and dtypes: the same local batch "
        "size in every rank (pad or drop a last, smaller batch in every rank alike)."
    )
    raise ProgramMismatchError(
        f"the ranks compiled {len(groups)} different programs for {name}; running them "
        f"would hang, abort, or give each rank a different result:\n"
        + "\n".join(lines)
        + f"\n{hint}"
    )


def signature(program: jax.stages.Lowered | jax.stages.Compiled) -> str:
    """A program's argument shapes and dtypes, as JAX writes them: ``float32[8,2], int32[]``."""
    return ", ".join(
        f"{np.dtype(arg.dtype).name}[{','.join(map(str, arg.shape))}]"
        for arg in jax.tree.leaves(program.args_info)
    )
