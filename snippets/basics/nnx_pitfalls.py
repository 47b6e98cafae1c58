"""Two Flax NNX pitfalls: an optimizer without wrt, and a jax.jit step that drops the optimizer.

`nnx.Optimizer` requires `wrt=` since Flax 0.11. A train step compiled with plain
`jax.jit` works on copies of the model and the optimizer: whatever it does not return
is lost, so a step that returns only the model trains with an optimizer that never
leaves step 0. The fix is to return the optimizer too, or to use `nnx.jit`; both fixed
steps donate the model and the optimizer, as a real training step should, which deletes
any array taken out of them before the step.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, n_in, n_hidden1, n_hidden2, n_out, *, rngs: nnx.Rngs):
        self.hidden1 = nnx.Linear(n_in, n_hidden1, rngs=rngs)
        self.hidden2 = nnx.Linear(n_hidden1, n_hidden2, rngs=rngs)
        self.out = nnx.Linear(n_hidden2, n_out, rngs=rngs)

    def __call__(self, x):
        x = jax.nn.relu(self.hidden1(x))
        x = jax.nn.relu(self.hidden2(x))
        return self.out(x)


def loss_fn(model, x, y):
    logits = model(x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss, jnp.mean(jnp.argmax(logits, axis=-1) == y)


# The optimizer of the training page: AdamW with a warmup that starts from 0.
schedule = optax.warmup_cosine_decay_schedule(
    init_value=0.0, peak_value=1e-2, warmup_steps=22, decay_steps=330, end_value=1e-4
)
tx = optax.adamw(learning_rate=schedule, weight_decay=1e-4)

# One fixed batch of 64 random "images" and labels.
x_key, y_key = jax.random.split(jax.random.key(0))
x = jax.random.uniform(x_key, (64, 64))
y = jax.random.randint(y_key, (64,), 0, 10)

# %% without_wrt
# --8<-- [start:without_wrt]
model = MLP(64, 128, 64, 10, rngs=nnx.Rngs(0))
try:
    optimizer = nnx.Optimizer(model, tx)  # the spelling of Flax 0.10 and older tutorials
except TypeError as error:
    print(f"TypeError: {error}")

optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
grads = nnx.state(model, nnx.Param)  # stands in for gradients: the same structure
try:
    optimizer.update(grads)  # the other half of the old spelling
except TypeError as error:
    print(f"TypeError: {error}")
# --8<-- [end:without_wrt]


# %% plain_jit
# --8<-- [start:plain_jit]
@jax.jit
def train_step_wrong(model, optimizer, x, y):
    grads = nnx.grad(lambda m: loss_fn(m, x, y)[0])(model)
    optimizer.update(model, grads)
    return model  # the updated optimizer is not returned: it is lost


@jax.jit(donate_argnames=("model", "optimizer"))  # both are replaced, so both are donated
def train_step_returns_both(model, optimizer, x, y):
    grads = nnx.grad(lambda m: loss_fn(m, x, y)[0])(model)
    optimizer.update(model, grads)
    return model, optimizer  # everything the step changed comes back


@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step_nnx(model, optimizer, x, y):
    grads = nnx.grad(lambda m: loss_fn(m, x, y)[0])(model)
    optimizer.update(model, grads)  # nnx.jit writes the changes back in place


# --8<-- [end:plain_jit]


# %% compare
# --8<-- [start:compare]
@nnx.jit
def measure(model, optimizer):
    adam_state = optimizer.opt_state[0]  # optax.adamw is a chain; Adam's moments come first
    step = optimizer.step[...]
    return step, schedule(step), optax.tree.norm(adam_state.mu), loss_fn(model, x, y)[0]


def report(name, model, optimizer):
    step, learning_rate, mu_norm, loss = measure(model, optimizer)
    print(
        f"{name:23} optimizer step {int(step)}  learning rate {learning_rate:.5f}  "
        f"|Adam mu| {mu_norm:.4f}  loss {loss:.4f}"
    )


def fresh_model_and_optimizer():
    model = MLP(64, 128, 64, 10, rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)


model, optimizer = fresh_model_and_optimizer()
report("before training", model, optimizer)

model, optimizer = fresh_model_and_optimizer()
for _ in range(5):
    model = train_step_wrong(model, optimizer, x, y)
report("jax.jit, model only", model, optimizer)

model, optimizer = fresh_model_and_optimizer()
for _ in range(5):
    model, optimizer = train_step_returns_both(model, optimizer, x, y)
report("jax.jit, both returned", model, optimizer)

model, optimizer = fresh_model_and_optimizer()
for _ in range(5):
    train_step_nnx(model, optimizer, x, y)
report("nnx.jit", model, optimizer)
# --8<-- [end:compare]

# %% donation
# --8<-- [start:donation]
model, optimizer = fresh_model_and_optimizer()
step = optimizer.step[...]  # the optimizer's own array, not a copy
kernel = model.out.kernel[...]
train_step_nnx(model, optimizer, x, y)  # donates every array inside both objects
print("taken out before the step, deleted:", step.is_deleted(), kernel.is_deleted())
step, kernel = optimizer.step[...], model.out.kernel[...]  # the objects' new arrays
print("read from the objects after it, deleted:", step.is_deleted(), kernel.is_deleted())
# --8<-- [end:donation]
