"""Data parallelism in PyTorch: the digits MLP under DistributedDataParallel, one process per device.

Run it as `torchrun --nproc-per-node 4 ddp.py` (CPU and gloo here; on GPUs, nccl and one
GPU per process). Each rank starts from `same_start.py`'s weights, takes its share of each
global batch, and accumulates the gradients of two micro-batches, the first inside
`no_sync()` so that DDP all-reduces once per step. A communication hook counts what DDP
all-reduces. Rank 0 prints the global loss of every step: `data_parallel.py` is its JAX
twin and must print the same losses.
"""

# torchrun: --nproc-per-node 4

# %% setup
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, pytorch_mlp

torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo")  # "nccl" on GPUs; torchrun sets RANK, WORLD_SIZE, MASTER_ADDR
rank, world = dist.get_rank(), dist.get_world_size()
MICRO_BATCHES = 2


def log(*args):
    if rank == 0:
        print(*args)


# %% train
# --8<-- [start:train]
sent = []  # the bytes of each all-reduce DDP starts


def counting_allreduce(state, bucket):
    sent.append(bucket.buffer().numel() * bucket.buffer().element_size())
    return allreduce_hook(state, bucket)


model = DDP(pytorch_mlp())
model.register_comm_hook(None, counting_allreduce)
optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
losses = []
for step in range(STEPS):
    images, labels = (torch.from_numpy(a).chunk(world)[rank] for a in batch(step))  # my share
    step_loss = torch.zeros(())
    micro_batches = zip(images.chunk(MICRO_BATCHES), labels.chunk(MICRO_BATCHES), strict=True)
    for micro, (x, y) in enumerate(micro_batches):
        last = micro == MICRO_BATCHES - 1
        with nullcontext() if last else model.no_sync():  # DDP all-reduces on the last one
            loss = nn.functional.cross_entropy(model(x), y) / MICRO_BATCHES
            loss.backward()
        step_loss += loss.detach()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(step_loss)
losses = torch.stack(losses)
dist.all_reduce(losses)  # each rank's loss is its half's: the mean over ranks is the step's
for step, loss in enumerate(losses.tolist()):
    log(f"step {step}: loss {loss / world:.6f}")
# --8<-- [end:train]

# %% traffic
# --8<-- [start:traffic]
parameters = sum(p.numel() * p.element_size() for p in model.parameters())
log(f"parameters: {parameters:,} bytes on every rank")
log(f"all-reduced per step: {sum(sent) // STEPS:,} bytes in {len(sent) // STEPS} bucket(s)")
# --8<-- [end:traffic]
dist.destroy_process_group()
