"""Training an MLP in pure JAX: parameters, vmap, grad and jit, and nothing else.

A two-hidden-layer perceptron on scikit-learn's 8x8 handwritten digits, written with
`jax` alone: parameters kept as a pytree (a list of `(w, b)` per layer) initialised from
split PRNG keys, a forward pass written for one example and batched with `jax.vmap`, a
cross-entropy loss, an SGD step with `jax.tree.map` under `jax.jit` that donates the old
parameters, a data loader that shuffles on the host with a new seed every epoch, losses
kept on the device and fetched once, and the accuracy on a held-out split.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% data
# --8<-- [start:data]
import jax.numpy as jnp
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

digits = load_digits()  # 1797 images of 8x8 pixels, values 0..16, shipped with scikit-learn
images = (digits.data / 16.0).astype(np.float32)  # flattened to 64 features in [0, 1]
labels = digits.target.astype(np.int32)
x_train, x_test, y_train, y_test = train_test_split(
    images, labels, test_size=0.2, random_state=0, stratify=labels
)
# --8<-- [end:data]
print(f"train: {x_train.shape}, test: {x_test.shape}, labels: {y_train.dtype}")
print(f"pixel range: [{x_train.min():.1f}, {x_train.max():.1f}], classes: {np.unique(labels)}")


# %% init
# --8<-- [start:init]
def init_layer(key, n_in, n_out):
    # He initialisation for ReLU layers: normal with variance 2 / fan_in.
    w = jax.random.normal(key, (n_in, n_out)) * jnp.sqrt(2.0 / n_in)
    b = jnp.zeros(n_out)
    return w, b


def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)  # one independent key per layer
    shapes = zip(sizes[:-1], sizes[1:], strict=True)  # (64, 128), (128, 64), (64, 10)
    return [init_layer(k, n_in, n_out) for k, (n_in, n_out) in zip(keys, shapes, strict=True)]


params = init_params(jax.random.key(0), [64, 128, 64, 10])
print(jax.tree.map(jnp.shape, params))
# --8<-- [end:init]
n_params = sum(leaf.size for leaf in jax.tree.leaves(params))
print(f"{len(jax.tree.leaves(params))} arrays, {n_params} parameters")


# %% forward
# --8<-- [start:forward]
def predict(params, x):
    """Logits for ONE example: x has shape (64,), no batch dimension."""
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


# Parameters are shared (None), examples are mapped along their first axis (0).
batched_predict = jax.vmap(predict, in_axes=(None, 0))
# --8<-- [end:forward]
print("one example:", predict(params, x_train[0]).shape)
print("a batch:    ", batched_predict(params, x_train[:32]).shape)


# %% loss
# --8<-- [start:loss]
def loss_fn(params, x, y):
    logits = batched_predict(params, x)
    log_probs = jax.nn.log_softmax(logits)  # log of softmax, computed stably
    # Cross-entropy: minus the log-probability of the right class, averaged over the batch.
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


@jax.jit  # one compiled program, not one dispatch per operation
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(batched_predict(params, x), axis=1) == y)


# --8<-- [end:loss]
print(f"initial loss {loss_fn(params, x_train, y_train):.4f}, ln(10) = {np.log(10):.4f}")

# %% train_step
# --8<-- [start:train_step]
LEARNING_RATE = 0.1


@jax.jit(donate_argnames="params")  # the new parameters may reuse the old ones' memory
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    # grads has the same structure as params: a list of (dw, db) pairs.
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return new_params, loss


# --8<-- [end:train_step]


# %% loader
# --8<-- [start:loader]
def batches(seed, x, y, batch_size):
    """Shuffled NumPy batches of one epoch; the last, incomplete batch is dropped."""
    order = np.random.default_rng(seed).permutation(len(x))  # on the host, like the data
    for start in range(0, len(x) - batch_size + 1, batch_size):
        index = order[start : start + batch_size]
        yield x[index], y[index]


# --8<-- [end:loader]
first_x, first_y = next(batches(1, x_train, y_train, 32))
print("first batch:", first_x.shape, first_y[:10])
print("batches per epoch:", len(x_train) // 32)

# %% train
# --8<-- [start:train]
BATCH_SIZE = 32
EPOCHS = 30
SEED = 1

epoch_losses = []  # one mean loss per epoch, left on the device
for epoch in range(EPOCHS):
    losses = []
    for x, y in batches(SEED + epoch, x_train, y_train, BATCH_SIZE):  # a new order each epoch
        params, loss = train_step(params, x, y)  # the old params are donated: rebind the name
        losses.append(loss)
    epoch_losses.append(jnp.stack(losses).mean())  # queued on the device; nothing waits

for epoch, loss in enumerate(jax.device_get(epoch_losses)):  # one wait, after training
    if epoch % 5 == 4 or epoch == 0:
        print(f"epoch {epoch + 1:2d}  train loss {loss:.4f}")
# --8<-- [end:train]

# %% evaluate
# --8<-- [start:evaluate]
print(f"train accuracy: {accuracy(params, x_train, y_train):.1%}")
print(f"held-out accuracy: {accuracy(params, x_test, y_test):.1%}")
# --8<-- [end:evaluate]
