"""vmap over DTensors in PyTorch: the batched dot product of `vmap_sharded.py`, its twin.

Run it as `torchrun --nproc-per-node 4 vmap_dtensor.py`. The same two batches of vectors
as `vmap_sharded.py`, DTensors sharded by rows (`Shard(0)`) over a 1-D `DeviceMesh` of the
4 ranks; `torch.vmap` of `torch.dot` gives one dot product per pair, a DTensor sharded by
rows too, with no collective (`CommDebugMode` counts them). Then the two batches sharded
differently: where JAX raises, DTensor moves the data itself.
"""

# torchrun: --nproc-per-node 4

# %% setup
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

dist.init_process_group("gloo")  # "nccl" on GPUs
rank = dist.get_rank()


def collectives(counted: CommDebugMode) -> str:
    """What CommDebugMode counted, as 'all_gather_into_tensor 1', or 'none'."""
    counts = counted.get_comm_counts()
    return ", ".join(f"{op.__name__} {n}" for op, n in counts.items()) or "none"


# %% vmap
# --8<-- [start:vmap]
mesh = init_device_mesh("cpu", (dist.get_world_size(),))  # "cuda" on GPUs
u = distribute_tensor(torch.arange(64.0).reshape(8, 8), mesh, [Shard(0)])
v = distribute_tensor(torch.ones(8, 8), mesh, [Shard(0)])

batched_dot = torch.vmap(torch.dot)  # one dot product per row: shape (8,)
with CommDebugMode() as counted:
    dots = batched_dot(u, v)
values = dots.full_tensor().tolist()  # an all-gather, outside the count
if rank == 0:
    print("u:", u.placements, " v:", v.placements)
    print("dots:", dots.placements, values)
    print("collectives:", collectives(counted))
    print("each rank holds", tuple(dots.to_local().shape), "of", tuple(dots.shape))
# --8<-- [end:vmap]

# %% mismatch
# --8<-- [start:mismatch]
v_columns = distribute_tensor(torch.ones(8, 8), mesh, [Shard(1)])  # split by columns
with CommDebugMode() as counted:
    dots = batched_dot(u, v_columns)  # no error: DTensor redistributes v_columns first
values = dots.full_tensor().tolist()
if rank == 0:
    print("v split by columns:", dots.placements, values)
    print("collectives:", collectives(counted))
# --8<-- [end:mismatch]
dist.destroy_process_group()
