"""Sharding the model in PyTorch: FSDP2, tensor parallelism with DTensor, and both on a 2-D mesh.

Run it as `torchrun --nproc-per-node 4 fsdp2_and_tp.py` (CPU and gloo here). The digits
MLP starts from `same_start.py`'s weights three times: fully sharded with `fully_shard`
(FSDP2) over the 4 ranks, split column- then row-wise with `parallelize_module` (tensor
parallelism) over the 4 ranks, and both on a 2 x 2 `DeviceMesh` ("dp" for FSDP, "tp" for
tensor parallelism). Each trains 8 steps with AdamW; rank 0 prints the losses, the
parameter bytes each rank keeps, and what each rank's collectives move per step, counted
by `collectives.py`. `sharded_mlp.py` is its JAX twin and must print the same losses.
"""

# torchrun: --nproc-per-node 4

# %% setup
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from collectives import CollectiveBytes
from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, pytorch_mlp

torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()


# --8<-- [start:train]
def train(model: nn.Module, part: int, parts: int) -> None:
    """Train 8 steps on share `part` of `parts` of each global batch; print the losses,
    this rank's parameter bytes and its collectives per step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    losses = []
    with CollectiveBytes() as sent:
        for step in range(STEPS):
            images, labels = (torch.from_numpy(a).chunk(parts)[part] for a in batch(step))
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach())
    losses = torch.stack(losses)
    dist.all_reduce(losses)  # ranks with the same share have the same loss: the mean is the step's
    kept = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    if rank == 0:
        print("  losses:", " ".join(f"{loss / world:.6f}" for loss in losses.tolist()))
        print(f"  parameters: {kept:,} bytes on rank 0")
        counted = ", ".join(
            f"{kind} {sent.count[kind] // STEPS} ({sent.bytes[kind] // STEPS:,} bytes)"
            for kind in sorted(sent.bytes)
        )
        print(f"  per step: {counted}")


# --8<-- [end:train]

# %% fsdp
# --8<-- [start:fsdp]
mesh = init_device_mesh("cpu", (world,))  # "cuda" on GPUs
model = pytorch_mlp()
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh)  # each Linear gathered just before it runs
fully_shard(model, mesh=mesh)
if rank == 0:
    print(f"FSDP2 over {world} ranks, each its share of the batch:")
train(model, part=rank, parts=world)
# --8<-- [end:fsdp]

# %% tp
# --8<-- [start:tp]
model = pytorch_mlp()
plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}  # model[0], then model[2]
parallelize_module(model, mesh, plan)
if rank == 0:
    print(f"tensor parallelism over {world} ranks, each the whole batch:")
train(model, part=0, parts=1)
# --8<-- [end:tp]

# %% fsdp_tp
# --8<-- [start:fsdp_tp]
mesh_2d = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
model = pytorch_mlp()
parallelize_module(model, mesh_2d["tp"], plan)
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh_2d["dp"])
fully_shard(model, mesh=mesh_2d["dp"])
if rank == 0:
    print(f"FSDP2 over dp x tensor parallelism over tp, mesh {tuple(mesh_2d.shape)}:")
train(model, part=mesh_2d.get_local_rank("dp"), parts=2)
# --8<-- [end:fsdp_tp]
dist.destroy_process_group()
