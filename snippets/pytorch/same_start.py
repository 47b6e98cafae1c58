"""The same start for a PyTorch script and its JAX twin: weights, data order, optimizer, model.

Both twins import this file: the digits MLP's initial weights, drawn once with NumPy, its
batches in one fixed order, and the MLP built with those weights in PyTorch or in Flax
(each function imports its framework only when called), so that the two frameworks train
from identical numbers and their losses can be compared step by step. The weights are
kept as Flax lays them out, a kernel of shape (inputs, outputs); PyTorch's `nn.Linear`
stores the transpose, (outputs, inputs).

Run on its own, it prints what both twins start from.
"""

# %% start
from functools import cache

import numpy as np
from sklearn.datasets import load_digits

# --8<-- [start:start]
INPUTS, HIDDEN, CLASSES = 64, 128, 10
BATCH, STEPS = 128, 8  # the global batch: every twin, however many devices it has
LEARNING_RATE, WEIGHT_DECAY = 1e-2, 1e-2  # AdamW on both sides, these values given explicitly


def initial_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """The MLP's parameters, named as Flax names them: kernels (inputs, outputs)."""
    rng = np.random.default_rng(seed)
    return {
        "hidden.kernel": rng.normal(0, INPUTS**-0.5, (INPUTS, HIDDEN)).astype(np.float32),
        "hidden.bias": np.zeros(HIDDEN, np.float32),
        "out.kernel": rng.normal(0, HIDDEN**-0.5, (HIDDEN, CLASSES)).astype(np.float32),
        "out.bias": np.zeros(CLASSES, np.float32),
    }


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of a step: images (BATCH, 64) in [0, 1] and labels (BATCH,)."""
    images, labels = shuffled_digits()
    rows = slice(step * BATCH % len(labels), step * BATCH % len(labels) + BATCH)
    return images[rows], labels[rows]


@cache
def shuffled_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 digits in one fixed order, read once."""
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    return (digits.data[order] / 16.0).astype(np.float32), digits.target[order].astype(np.int64)


# --8<-- [end:start]


# %% models
# --8<-- [start:models]
def pytorch_mlp():
    """The MLP as a `torch.nn.Sequential`, with `initial_weights()` transposed."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Linear(INPUTS, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
    )
    weights = initial_weights()
    with torch.no_grad():
        for layer, name in ((model[0], "hidden"), (model[2], "out")):
            layer.weight.copy_(torch.from_numpy(weights[f"{name}.kernel"].T))
            layer.bias.copy_(torch.from_numpy(weights[f"{name}.bias"]))
    return model


def flax_mlp():
    """The MLP as a Flax NNX module, with `initial_weights()` as they are."""
    import jax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.hidden = nnx.Linear(INPUTS, HIDDEN, rngs=rngs)
            self.out = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

        def __call__(self, x):
            return self.out(jax.nn.relu(self.hidden(x)))

    model = MLP(nnx.Rngs(0))
    for name, value in initial_weights().items():
        layer, kind = name.split(".")
        getattr(getattr(model, layer), kind)[...] = value
    return model


# --8<-- [end:models]


# %% summary
if __name__ == "__main__":
    weights = initial_weights()
    images, labels = batch(0)
    print("parameters:", {name: value.shape for name, value in weights.items()})
    print(f"step 0: {images.shape[0]} images, first labels {labels[:8].tolist()}")
    print(f"sum of every weight: {sum(float(v.sum()) for v in weights.values()):.6f}")
