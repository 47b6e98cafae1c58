"""Saving and resuming in PyTorch: FSDP2's model and AdamW state through torch.distributed.checkpoint, stopped after 4 steps and resumed.

Run it as `torchrun --nproc-per-node 4 dcp_resume.py`. The digits MLP trains 4 steps from
`same_start.py`'s weights, fully sharded over the 4 ranks; `get_state_dict` gives the
sharded state of the model and of AdamW, and `dcp.save` has each rank write its own
shards into `digits-dcp`. A new model and optimizer then load them back (`dcp.load`
fills their shards in place) and train the last 4 steps. Rank 0 prints the 8 losses,
which must equal the uninterrupted run's (`fsdp2_and_tp.py`) and those of
`orbax_resume.py`, its JAX twin.
"""

# torchrun: --nproc-per-node 4

# %% setup
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, pytorch_mlp

CHECKPOINT = "digits-dcp"  # in the folder it runs in
torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()


def sharded_model_and_optimizer():
    model = pytorch_mlp()
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)


def train(model, optimizer, steps: range) -> list[torch.Tensor]:
    losses = []
    for step in steps:
        images, labels = (torch.from_numpy(a).chunk(world)[rank] for a in batch(step))
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses


# %% save
# --8<-- [start:save]
model, optimizer = sharded_model_and_optimizer()
losses = train(model, optimizer, range(0, STEPS // 2))
model_state, optimizer_state = get_state_dict(model, optimizer)  # sharded, as DTensors
dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=CHECKPOINT)
del model, optimizer  # as if the job had ended here
# --8<-- [end:save]

# %% resume
# --8<-- [start:resume]
model, optimizer = sharded_model_and_optimizer()  # the start weights again
# get_state_dict creates AdamW's state too: the shapes to fill
model_state, optimizer_state = get_state_dict(model, optimizer)
state = {"model": model_state, "optimizer": optimizer_state}
dcp.load(state, checkpoint_id=CHECKPOINT)  # each rank reads its own shards, in place
set_state_dict(
    model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
)
losses += train(model, optimizer, range(STEPS // 2, STEPS))
losses = torch.stack(losses)
dist.all_reduce(losses)
if rank == 0:
    print("losses:", " ".join(f"{loss / world:.6f}" for loss in losses.tolist()))
# --8<-- [end:resume]
dist.destroy_process_group()
