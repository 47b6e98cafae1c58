"""Optax learning-rate schedules next to the PyTorch schedulers they replace.

An Optax schedule is a plain function from the optimizer's step count to a learning
rate. This prints five of them at the same steps as the PyTorch scheduler each one
stands in for, so the two can be compared number by number.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% schedules
import numpy as np
import optax

# --8<-- [start:schedules]
BASE_LR = 0.1
schedules = {
    "StepLR(step_size=4, gamma=0.5)": optax.exponential_decay(
        BASE_LR, transition_steps=4, decay_rate=0.5, staircase=True
    ),
    "MultiStepLR(milestones=[4, 8], gamma=0.5)": optax.piecewise_constant_schedule(
        BASE_LR, {4: 0.5, 8: 0.5}
    ),
    "CosineAnnealingLR(T_max=12)": optax.cosine_decay_schedule(BASE_LR, decay_steps=12),
    "OneCycleLR(max_lr=0.1, total_steps=12)": optax.cosine_onecycle_schedule(
        12, peak_value=BASE_LR
    ),
    "LambdaLR(lr_lambda=lambda s: 0.8**s)": lambda step: BASE_LR * 0.8**step,
}
steps = np.arange(0, 13, 2)
print(f"{'step':42}" + "".join(f"{step:>7}" for step in steps))
for name, schedule in schedules.items():
    rates = jax.vmap(schedule)(steps)  # a schedule takes one step; vmap evaluates many
    print(f"{name:42}" + "".join(f"{rate:7.4f}" for rate in np.asarray(rates)))
# --8<-- [end:schedules]
