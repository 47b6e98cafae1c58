"""Mixed precision in PyTorch with DDP and `torch.autocast`: bfloat16 compute, float32 weights and gradients.

Run it as `torchrun --nproc-per-node 4 autocast.py`. The digits MLP of `same_start.py`
trains 8 steps under `DistributedDataParallel`, its forward pass inside
`torch.autocast(device_type="cpu", dtype=torch.bfloat16)` ("cuda" on GPUs), which runs
each matrix product in bfloat16 and keeps the weights float32: their gradients are
float32, and so is DDP's all-reduce of them. Rank 0 prints the losses and what DDP
all-reduced per step. `bf16_data_parallel.py` is its JAX twin.
"""

# torchrun: --nproc-per-node 4
# numbers within 2e-3 in cell train: PyTorch picks its bfloat16 kernels by CPU (AVX512-BF16, AVX2), so bfloat16 losses may differ in the 4th decimal between CPUs

# %% setup
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, pytorch_mlp

torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()

# %% train
# --8<-- [start:train]
sent = []  # the dtype and bytes of each all-reduce DDP starts


def counting_allreduce(state, bucket):
    buffer = bucket.buffer()
    sent.append((buffer.dtype, buffer.numel() * buffer.element_size()))
    return allreduce_hook(state, bucket)


model = DDP(pytorch_mlp())  # float32 weights
model.register_comm_hook(None, counting_allreduce)
optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
losses = []
for step in range(STEPS):
    images, labels = (torch.from_numpy(a).chunk(world)[rank] for a in batch(step))
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):  # "cuda" on GPUs
        logits = model(images)  # bfloat16
    loss = nn.functional.cross_entropy(logits.float(), labels)  # the loss in float32
    loss.backward()  # float32 gradients, all-reduced by DDP
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.detach())
losses = torch.stack(losses)
dist.all_reduce(losses)  # each rank's loss is its quarter's: the mean is the step's
if rank == 0:
    print("losses:", " ".join(f"{loss / world:.4f}" for loss in losses.tolist()))
    dtypes = {str(dtype).removeprefix("torch.") for dtype, _ in sent}
    print(f"all-reduced per step: {sum(b for _, b in sent) // STEPS:,} bytes of", *dtypes)
# --8<-- [end:train]
dist.destroy_process_group()
