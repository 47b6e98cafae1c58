"""The same MLP with Flax NNX and Optax.

The digits classifier of the pure-JAX page, written the way most JAX training code is
written today: an `nnx.Module`, an `nnx.Optimizer` around `optax.adamw` with a warmup
and cosine learning-rate schedule, an `nnx.jit` train step that donates the model and the
optimizer and returns the loss and the accuracy, and the accuracy on the held-out split.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% data
# --8<-- [start:data]
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

digits = load_digits()
images = (digits.data / 16.0).astype(np.float32)
labels = digits.target.astype(np.int32)
x_train, x_test, y_train, y_test = train_test_split(
    images, labels, test_size=0.2, random_state=0, stratify=labels
)
# --8<-- [end:data]
print(f"train: {x_train.shape}, test: {x_test.shape}")


# %% model
# --8<-- [start:model]
class MLP(nnx.Module):
    def __init__(self, n_in, n_hidden1, n_hidden2, n_out, *, rngs: nnx.Rngs):
        self.hidden1 = nnx.Linear(n_in, n_hidden1, rngs=rngs)
        self.hidden2 = nnx.Linear(n_hidden1, n_hidden2, rngs=rngs)
        self.out = nnx.Linear(n_hidden2, n_out, rngs=rngs)

    def __call__(self, x):
        x = jax.nn.relu(self.hidden1(x))
        x = jax.nn.relu(self.hidden2(x))
        return self.out(x)


model = MLP(64, 128, 64, 10, rngs=nnx.Rngs(0))  # parameters are created here, from seed 0
for path, param in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    print(".".join(map(str, path)), param.shape)
print("logits:", model(x_train[:5]).shape)  # works on a batch as it is: no vmap needed
# --8<-- [end:model]

# %% schedule
# --8<-- [start:schedule]
BATCH_SIZE = 64
EPOCHS = 15
STEPS_PER_EPOCH = len(x_train) // BATCH_SIZE
TOTAL_STEPS = EPOCHS * STEPS_PER_EPOCH

schedule = optax.warmup_cosine_decay_schedule(
    init_value=0.0,
    peak_value=1e-2,
    warmup_steps=STEPS_PER_EPOCH,  # a linear warmup over the first epoch
    decay_steps=TOTAL_STEPS,  # counted from step 0, warmup included
    end_value=1e-4,
)
for step in [0, STEPS_PER_EPOCH // 2, STEPS_PER_EPOCH, TOTAL_STEPS // 2, TOTAL_STEPS]:
    print(f"step {step:3d}: learning rate {schedule(step):.5f}")
# --8<-- [end:schedule]

# %% optimizer
# --8<-- [start:optimizer]
tx = optax.adamw(learning_rate=schedule, weight_decay=1e-4)
optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)  # state for every nnx.Param of model
# --8<-- [end:optimizer]
print("optimizer step:", optimizer.step[...])


# %% train_step
# --8<-- [start:train_step]
def loss_fn(model, x, y):
    logits = model(x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
    return loss, accuracy  # (value to differentiate, auxiliary output)


@nnx.jit(donate_argnames=("model", "optimizer"))  # new state may reuse the old memory
def train_step(model, optimizer, x, y):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, accuracy), grads = grad_fn(model, x, y)
    optimizer.update(model, grads)  # updates model's parameters and the optimizer, in place
    return loss, accuracy


@nnx.jit
def eval_step(model, x, y):
    return loss_fn(model, x, y)


# --8<-- [end:train_step]


# %% loader
# The loader of the pure-JAX page: shuffled on the host, with a new seed every epoch.
def batches(seed, x, y, batch_size):
    """Shuffled NumPy batches of one epoch; the last, incomplete batch is dropped."""
    order = np.random.default_rng(seed).permutation(len(x))
    for start in range(0, len(x) - batch_size + 1, batch_size):
        index = order[start : start + batch_size]
        yield x[index], y[index]


# %% train
# --8<-- [start:train]
SEED = 1
history = []  # per epoch: (step, learning rate, mean loss, mean accuracy), on the device
for epoch in range(EPOCHS):
    losses, accuracies = [], []
    for x, y in batches(SEED + epoch, x_train, y_train, BATCH_SIZE):
        loss, accuracy = train_step(model, optimizer, x, y)
        losses.append(loss)
        accuracies.append(accuracy)
    step = jnp.copy(optimizer.step[...])  # a copy: the next train_step donates the original
    history.append((step, schedule(step), jnp.stack(losses).mean(), jnp.stack(accuracies).mean()))

for epoch, (step, lr, loss, accuracy) in enumerate(jax.device_get(history)):  # one wait
    if epoch % 3 == 2 or epoch == 0:
        print(
            f"epoch {epoch + 1:2d}  step {step:3d}  lr {lr:.5f}  "
            f"train loss {loss:.4f}  train accuracy {accuracy:.1%}"
        )
# --8<-- [end:train]

# %% evaluate
# --8<-- [start:evaluate]
test_loss, test_accuracy = eval_step(model, x_test, y_test)
print(f"held-out loss: {test_loss:.4f}")
print(f"held-out accuracy: {test_accuracy:.1%}")
# --8<-- [end:evaluate]
