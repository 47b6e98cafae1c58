"""Activation checkpointing in PyTorch: what autograd keeps for the backward pass, with and without it.

`torch.utils.checkpoint.checkpoint` runs the hidden layer of the digits MLP
(`same_start.py`'s weights) without keeping its activations, and runs it again in the
backward pass. A `saved_tensors_hooks` pair counts the bytes autograd keeps for the
backward pass, parameters left out. It prints them with and without checkpointing, and
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
model = pytorch_mlp()
hidden, out = nn.Sequential(model[0], model[1]), model[2]  # Linear + ReLU, then Linear
parameters = {p.data_ptr() for p in model.parameters()}
images, labels = (torch.from_numpy(a) for a in batch(0))


def saved_bytes_and_loss(remat: bool) -> tuple[int, torch.Tensor]:
    """Forward and backward on the first batch; the bytes autograd kept in between."""
    kept = []

    def pack(tensor):  # called for each tensor autograd keeps for the backward pass
        if tensor.data_ptr() not in parameters:
            kept.append(tensor.numel() * tensor.element_size())
        return tensor

    with saved_tensors_hooks(pack, lambda tensor: tensor):
        h = checkpoint(hidden, images, use_reentrant=False) if remat else hidden(images)
        loss = nn.functional.cross_entropy(out(h), labels)
    model.zero_grad()
    loss.backward()
    return sum(kept), loss.detach()


for remat in (False, True):
    kept, loss = saved_bytes_and_loss(remat)
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    if rank == 0:
        name = "checkpointed hidden layer" if remat else "no checkpointing"
        print(f"{name}: {kept:,} bytes kept, loss {loss:.6f}, gradient norm {norm:.6f}")
# --8<-- [end:saved]
