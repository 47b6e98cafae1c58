"""Counting what PyTorch communicates: every c10d collective a block of code starts, with its bytes.

The twins import `CollectiveBytes` from here: a `TorchDispatchMode` that sees each
collective op as PyTorch dispatches it (DDP's, FSDP2's, DTensor's alike) and adds up the
bytes of its output per kind, named as XLA names them. `CommDebugMode` (`torch.distributed.tensor.debug`) counts
the same ops but not their bytes. Run it with `torchrun --nproc-per-node 4 collectives.py`.
"""

# torchrun: --nproc-per-node 4

# %% counter
import re
from collections import Counter

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

# --8<-- [start:counter]
NOT_COLLECTIVES = {"barrier", "wait-tensor", "wrap-tensor-autograd"}  # ops that move no data


class CollectiveBytes(TorchDispatchMode):
    """Inside `with CollectiveBytes() as sent:`, `sent.bytes[kind]` adds up the output
    bytes of every collective of that kind (`"all-gather"`, `"reduce-scatter"`, ...)."""

    def __init__(self):
        super().__init__()
        self.bytes, self.count = Counter(), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        namespace, _, name = func.name().partition("::")
        # "_allgather_base_" or "all_gather_into_tensor" -> "all-gather", as XLA names it.
        kind = name.strip("_").removesuffix("_base").removesuffix("_into_tensor")
        kind = re.sub(r"^all(?=[a-z])", "all-", kind.replace("_", "-"))
        if namespace in ("c10d", "_c10d_functional") and kind not in NOT_COLLECTIVES:
            # c10d's ops write into their first argument; functional ones return the output.
            output = args[0] if namespace == "c10d" else result
            output = output[0] if isinstance(output, list) else output
            self.bytes[kind] += output.numel() * output.element_size()
            self.count[kind] += 1
        return result


# --8<-- [end:counter]

# %% example
# --8<-- [start:example]
if __name__ == "__main__":
    dist.init_process_group("gloo")
    with CollectiveBytes() as sent:
        dist.all_reduce(torch.ones(1000))  # 4,000 bytes of float32
    if dist.get_rank() == 0:
        print(dict(sent.count), dict(sent.bytes))
    dist.destroy_process_group()
# --8<-- [end:example]
