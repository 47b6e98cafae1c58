"""From PyTorch to JAX, the PyTorch half: the digits MLP trained with FSDP2, saved as safetensors by torch.distributed.checkpoint.

Run it as `torchrun --nproc-per-node 4 save_for_jax.py`; `from_pytorch.py` then loads
what it saves into a sharded JAX model. The MLP trains 8 steps from `same_start.py`'s
weights, fully sharded over the 4 ranks. `dcp.save` with a `HuggingFaceStorageWriter`
has each rank write its own shards; rank 0 then rebuilds one whole tensor at a time and
appends it to one safetensors file: no rank ever holds the whole model. Last, it prints the loss
on the next batch, which `from_pytorch.py` must reproduce. Both use the
folder `digits-from-pytorch` in the folder they run in.
"""

# torchrun: --nproc-per-node 4

# %% setup
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import HuggingFaceStorageWriter
from torch.distributed.fsdp import fully_shard

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, pytorch_mlp

CHECKPOINT = Path("digits-from-pytorch")  # in the folder it runs in
torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()

# %% train
model = pytorch_mlp()
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
for step in range(STEPS):
    images, labels = (torch.from_numpy(a).chunk(world)[rank] for a in batch(step))
    nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
    optimizer.zero_grad()

# %% save
# --8<-- [start:save]
writer = HuggingFaceStorageWriter(str(CHECKPOINT), save_distributed=True, enable_consolidation=True)
dcp.save(model.state_dict(), storage_writer=writer)  # each rank writes its shards
if rank == 0:
    for file in sorted(CHECKPOINT.glob("*.safetensors")):
        print(f"{file.name}: {file.stat().st_size:,} bytes")
# --8<-- [end:save]

# %% next_loss
# --8<-- [start:next_loss]
images, labels = (torch.from_numpy(a) for a in batch(STEPS))  # the next batch, whole
with torch.no_grad():
    loss = nn.functional.cross_entropy(model(images), labels)
if rank == 0:
    print(f"PyTorch, loss on the next batch: {loss.item():.6f}")
# --8<-- [end:next_loss]
dist.destroy_process_group()
