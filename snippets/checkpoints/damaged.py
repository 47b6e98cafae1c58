"""A damaged checkpoint: train.py resumes from the newest intact one, or stops with one error.

Runs `train.py` (beside this script) under `python -m jaxpar.launch`, as you would from a
shell, three times with the same `--workdir`: for 8 steps, which keeps checkpoints 4 and 8;
for 12 steps after one bit of a data file of checkpoint 8 was flipped, which deletes
checkpoint 8 and resumes after step 4; and after checkpoint 8 was damaged again and a file
of checkpoint 12 was cut short, which stops before restoring anything. `train.py` finds the
damage by the size and SHA-256 of every file, which it records in each checkpoint.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# train.py lies next to this file (in a notebook: in the current folder).
HERE = Path(globals().get("__file__", "train.py")).resolve().parent
workdir = Path(tempfile.mkdtemp()) / "run"
LAUNCH = ["-m", "jaxpar.launch", "--nproc", "2", "--devices-per-process", "4", "--timeout", "120"]


def shown(text):
    """The work folder as run, and a data file's random name as <name>."""
    return re.sub(r"/d/[0-9a-f]{32}", "/d/<name>", text.replace(str(workdir), "run"))


def launch(*options):
    """Run train.py under the launcher: its exit status, the lines it added to run/log.txt
    after the five on the data that every start logs, and the errors it printed."""
    print("$ python", *LAUNCH, "train.py --workdir run", *options)
    log = workdir / "log.txt"
    before = len(log.read_text().splitlines()) if log.exists() else 0
    arguments = [sys.executable, *LAUNCH, "train.py", "--workdir", str(workdir), *options]
    result = subprocess.run(arguments, cwd=HERE, capture_output=True, text=True)
    logged = shown(log.read_text()).splitlines()[before + 5 :]
    errors = [shown(line) for line in result.stderr.splitlines() if "error:" in line]
    return result.returncode, logged, errors


def checkpoints():
    return sorted(path.name for path in (workdir / "checkpoints").iterdir())


def flip_a_bit(step):
    """Flip one bit in the middle of process 1's largest data file of a checkpoint."""
    files = (workdir / "checkpoints" / str(step) / "state" / "ocdbt.process_1").glob("d/*")
    path = max(files, key=lambda path: path.stat().st_size)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0b1000
    path.write_bytes(data)
    print("flipped one bit of", shown(str(path)))


# --8<-- [end:setup]

# %% flipped
# --8<-- [start:flipped]
status, logged, errors = launch("--steps", "8")
print("exit status", status, "- run/checkpoints:", checkpoints())
flip_a_bit(8)
status, logged, errors = launch("--steps", "12")
end = next(i for i, line in enumerate(logged) if line.startswith("checkpoints kept"))
print(
    "new in run/log.txt, without the losses:",
    *[line for line in logged[:end] if not line.startswith("step")],
    sep="\n  ",
)
print("exit status", status, "- run/checkpoints:", checkpoints())
# --8<-- [end:flipped]

# %% nothing_intact
# --8<-- [start:nothing_intact]
flip_a_bit(8)
position = workdir / "checkpoints" / "12" / "data" / "process_1-of-2.json"
position.write_text(position.read_text()[:11])  # as a copy cut short would leave it
print("cut", shown(str(position)), "to 11 bytes")
status, logged, errors = launch("--steps", "16")
print("new in run/log.txt:", *logged, sep="\n  ")
print(*errors, sep="\n")
print("exit status", status, "- run/checkpoints:", checkpoints())
# --8<-- [end:nothing_intact]
