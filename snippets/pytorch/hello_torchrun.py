"""torchrun in PyTorch: what it tells each process, and the process group built from that.

Run it as `torchrun --nproc-per-node 4 hello_torchrun.py`. torchrun starts 4 processes and
tells each its place in environment variables; `init_process_group` reads them (and
`MASTER_ADDR`, `MASTER_PORT`, where rank 0 serves the rendezvous). Every rank reports what
it was told and what the process group says, and rank 0 prints all of it, gathered with
`all_gather_object`. `hello_launch.py` is its JAX twin.
"""

# torchrun: --nproc-per-node 4

# %% setup
import os

import torch
import torch.distributed as dist

# %% hello
# --8<-- [start:hello]
told = {name: int(os.environ[name]) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
dist.init_process_group("gloo")  # "nccl" on GPUs
device = torch.device("cpu")  # on GPUs: torch.device("cuda", told["LOCAL_RANK"])
mine = (told, dist.get_rank(), dist.get_world_size(), str(device))
everyone = [None] * dist.get_world_size()
dist.all_gather_object(everyone, mine)
if dist.get_rank() == 0:
    for told, rank, world, device in everyone:
        print(f"rank {rank} of {world}: told {told}, computes on {device}")
# --8<-- [end:hello]
dist.destroy_process_group()
