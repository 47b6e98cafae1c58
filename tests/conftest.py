"""Shared set-up: 8 simulated CPU devices in every test process, as on the site's pages."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
