"""A step in which a rank gets stuck or compiles another program, and jaxpar's checks that name it.

`stuck_rank.py` runs this script under `python -m jaxpar.launch --nproc 2` once per case,
the case as its argument: none (every rank loads the same batch), `hang` (rank 1 never finishes loading its batch; the other
rank waits in the step's all-reduce), `barrier` (the same, with a barrier with a timeout
before the step), `names` (the ranks pass different names to a named barrier), `uneven`
(rank 1's last batch has 3 rows instead of 4) and `checked` (the same, checked before
running). From the second step on, every rank dumps the stacks of its threads when a
step takes longer than 2 s.
"""

# jaxpar.launch: --nproc 2 --devices-per-process 1 --timeout 60
# output checked through stuck_rank.py: it runs this script in each case and prints its lines

import jax

from jaxpar import initialize_distributed

initialize_distributed()

import faulthandler
import sys
import time

import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import ProgramMismatchError, barrier, check_same_program

CASE = sys.argv[1] if len(sys.argv) > 1 else "same"
mesh = jax.make_mesh((jax.device_count(),), ("data",))
rank = jax.process_index()


def load_batch(step: int) -> np.ndarray:
    if CASE in ("hang", "barrier") and rank == 1 and step == 1:
        time.sleep(60)  # a stuck read: a hung file system, a deadlock in a data loader
    rows = 3 if CASE in ("uneven", "checked") and rank == 1 else 4  # a last, smaller batch
    return np.ones((rows, 2), np.float32)


loss = jax.jit(lambda x: jnp.mean(x**2), out_shardings=NamedSharding(mesh, P()))
# --8<-- [start:loop]
for step in range(2 if CASE in ("hang", "barrier") else 1):
    if step == 1:  # from the second step on: the first one compiles, and takes longer
        # If this step takes longer than 2 s, write every thread's stack to standard
        # error (the rank's log); the rank goes on. Each call re-arms the timer.
        faulthandler.dump_traceback_later(2, exit=False, file=sys.stderr)
    local = load_batch(step)
    batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local)
    if CASE == "barrier":
        barrier("step", timeout_s=4)  # in every rank, before the step's collectives
    try:
        if CASE == "names":
            multihost_utils.sync_global_devices("after load" if rank == 0 else "after save")
        lowered = loss.lower(batch)
        if CASE == "checked":
            check_same_program(lowered, "the loss")  # before running it
        value = lowered.compile()(batch)  # its all-reduce waits for every rank
        print(f"step {step}: loss {float(value):.4f}, global batch of {batch.shape[0]} rows")
    except (AssertionError, ProgramMismatchError) as error:  # raised in every rank alike
        print(f"{type(error).__name__}: {error}")
faulthandler.cancel_dump_traceback_later()
# --8<-- [end:loop]
