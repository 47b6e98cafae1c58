"""Recorded outputs on other CPUs: which numbers move when XLA:CPU computes with other kernels.

A snippet's recording must hold on any reader's CPU. XLA:CPU compiles its own code for the
CPU's vector width, and runs dots and convolutions with YNNPACK kernels that it picks by
CPU (AVX2, AVX512, AVX512-BF16, AMX); bfloat16 products and float32 sums can then round
differently. This command runs snippets as other CPUs would and compares each output with
its recording under the snippet's declared tolerances (``sitetools.tolerances``):

- ``avx2``: XLA's own code limited to AVX2 (``--xla_cpu_max_isa=AVX2``), as on a CPU
  without AVX512;
- ``no-ynn``: XLA's own dot kernels instead of YNNPACK's (``--xla_cpu_experimental_ynn_fusion_type=``),
  the widest change of kernels there is; its fusions differ too, so compiled memory moves,
  which no reader's CPU changes (XLA chooses YNN fusions by types and shapes);
- ``one-core``: one CPU core, as on a small virtual machine;
- ``haswell``: the whole program under QEMU as an AVX2 CPU without AVX512 or BF16
  (``qemu-x86_64 -cpu Haswell-v4``, from Debian's ``qemu-user``), so YNNPACK picks its
  AVX2 kernels too; one-process snippets only, and about 40 times slower. Debian 12's
  QEMU 7.2 gets ring_attention.py's zig-zag attention wrong (an error of 2.27) even with
  XLA's code limited to SSE4.2, which runs right natively: confirm what moves only there
  on a real CPU before you believe it.

Command line (``PYTHONPATH=tools``; ``make cpu-variants`` runs the first three)::

    python -m sitetools.cpus [--variant avx2 --variant ...] [SNIPPET ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sitetools import REPO
from sitetools.snippets import (
    checked_through,
    discover,
    launch_arguments,
    output_path,
    read_sections,
    run,
    shared_environment,
    tolerances,
)
from sitetools.tolerances import differences

FLAGS = {
    "avx2": "--xla_cpu_max_isa=AVX2",
    "no-ynn": "--xla_cpu_experimental_ynn_fusion_type=",
}
VARIANTS = (*FLAGS, "one-core", "haswell")
QEMU = ["qemu-x86_64", "-cpu", "Haswell-v4"]


def output_on(variant: str, snippet: Path) -> str | None:
    """What ``snippet`` prints on the CPU ``variant`` stands for (None: it cannot run there)."""
    if variant in FLAGS:
        os.environ["XLA_FLAGS"] = FLAGS[variant]
        try:
            return run(snippet, timeout=1800).stdout
        finally:
            del os.environ["XLA_FLAGS"]
    if variant == "one-core":
        command = [sys.executable, "-m", "sitetools.snippets", "run", str(snippet)]
        return _run(["taskset", "-c", "0", *command])
    if launch_arguments(snippet) is not None or shutil.which(QEMU[0]) is None:
        return None  # QEMU emulates one process; the launcher's ranks would run natively
    return _run([*QEMU, sys.executable, "-m", "sitetools.snippets", "run", str(snippet)])


def _run(command: list[str]) -> str:
    env = shared_environment()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    return done.stdout


def report(variant: str, snippet: Path) -> str:
    """One line on ``snippet`` under ``variant``, and the cells that moved beyond their
    tolerance, recorded line against this run's."""
    name = snippet.relative_to(REPO)
    output = output_on(variant, snippet)
    if output is None:
        return f"{variant}: {name}: not run (several processes, or no {QEMU[0]})"
    recorded = output_path(snippet).read_text(encoding="utf-8")
    if output == recorded:
        return f"{variant}: {name}: same"
    if not differences(recorded, output, tolerances(snippet)):
        return f"{variant}: {name}: within its declared tolerance"
    old, new = read_sections(recorded), read_sections(output)
    moved = [
        f"    {cell}: {line!r} -> {other!r}"
        for cell in old
        for line, other in zip(old[cell].splitlines(), new.get(cell, "").splitlines(), strict=False)
        if line != other
    ]
    return "\n".join([f"{variant}: {name}: MOVED", *moved])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sitetools.cpus", description=__doc__)
    parser.add_argument("--variant", action="append", choices=VARIANTS)
    parser.add_argument("snippets", type=Path, nargs="*")
    args = parser.parse_args(argv)
    snippets = [p.resolve() for p in args.snippets] or [
        s for s in discover() if checked_through(s) is None
    ]
    moved = 0
    for variant in args.variant or list(FLAGS) + ["one-core"]:
        for snippet in snippets:
            line = report(variant, snippet)
            moved += "MOVED" in line
            print(line, flush=True)
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
