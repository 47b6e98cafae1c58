"""Mixed precision in PyTorch: FSDP2 computing in bfloat16 over float32 weights, and what it sends.

Run it as `torchrun --nproc-per-node 4 mixed_precision.py`. FSDP2's `MixedPrecisionPolicy`
keeps each rank's shard of the weights (and AdamW's state) in float32, gathers them as
bfloat16 for the forward and backward passes, and reduce-scatters the gradients in
float32. The digits MLP trains 8 steps from `same_start.py`'s weights; rank 0 prints the
losses and what the collectives moved per step, counted by `collectives.py`.
`bf16_step.py` is its JAX twin.
"""

# torchrun: --nproc-per-node 4
# numbers within 2e-3 in cell train: PyTorch picks its bfloat16 kernels by CPU (AVX512-BF16, AVX2), so bfloat16 losses may differ in the 4th decimal between CPUs

# %% setup
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from collectives import CollectiveBytes
from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, pytorch_mlp

torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()

# %% train
# --8<-- [start:train]
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
model = pytorch_mlp()
for layer in (model[0], model[2]):
    fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
losses = []
with CollectiveBytes() as sent:
    for step in range(STEPS):
        images, labels = (torch.from_numpy(a).chunk(world)[rank] for a in batch(step))
        logits = model(images)  # bfloat16
        loss = nn.functional.cross_entropy(logits.float(), labels)  # the loss in float32
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
losses = torch.stack(losses)
dist.all_reduce(losses)
if rank == 0:
    print("losses:", " ".join(f"{loss / world:.4f}" for loss in losses.tolist()))
    print("weights kept as", {p.dtype for p in model.parameters()}.pop())
    counted = ", ".join(
        f"{kind} {sent.count[kind] // STEPS} ({sent.bytes[kind] // STEPS:,} bytes)"
        for kind in sorted(sent.bytes)
    )
    print(f"per step: {counted}")
# --8<-- [end:train]
dist.destroy_process_group()
