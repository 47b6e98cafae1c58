"""Activation checkpointing in PyTorch: what autograd keeps for the backward pass, with and without it.

`torch.utils.checkpoint.checkpoint` runs the digits MLP (`same_start.py`'s weights) as one
block, without keeping the activations inside it, and runs it again in the backward pass.
A `saved_tensors_hooks` pair sees every tensor autograd keeps for the backward pass; each
storage is counted once, parameters left out. It prints them with and without checkpointing, and
the loss and gradient norm of the first batch, which checkpointing must not change.
`remat.py` is its JAX twin. It needs no process group: run it with `python checkpointing.py`
(the tests run it under `torchrun`, where every rank does the same and rank 0 prints).
"""

# torchrun: --nproc-per-node 4

# %% setup
import os

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils.checkpoint import checkpoint

from same_start import batch, pytorch_mlp

torch.use_deterministic_algorithms(True)
rank = int(os.environ.get("RANK", "0"))  # under torchrun, only rank 0 prints

# %% saved
# --8<-- [start:saved]
model = pytorch_mlp()  # Linear, ReLU, Linear: one block with activations inside
parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
images, labels = (torch.from_numpy(a) for a in batch(0))


def saved_bytes_and_loss(remat: bool) -> tuple[int, torch.Tensor]:
    """Forward and backward on the first batch; the bytes autograd kept in between."""
    kept = {}  # storage -> bytes: a tensor saved twice (by ReLU, then by Linear) counts once

    def pack(tensor):  # called for each tensor an operation saves for the backward pass
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = checkpoint(model, images, use_reentrant=False) if remat else model(images)
        loss = nn.functional.cross_entropy(logits, labels)
    model.zero_grad()
    loss.backward()
    return sum(kept.values()), loss.detach()


for remat in (False, True):
    kept, loss = saved_bytes_and_loss(remat)
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    if rank == 0:
        name = "checkpointed MLP" if remat else "no checkpointing"
        print(f"{name}: {kept:,} bytes kept, loss {loss:.6f}, gradient norm {norm:.6f}")
# --8<-- [end:saved]
