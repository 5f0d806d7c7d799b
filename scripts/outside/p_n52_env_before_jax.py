# New: install() / `typecheck-guard run` import jax (and numpy, jaxtyping, typeguard) before the
# program's own code runs.  A program that configures JAX through the environment before
# importing it (JAX_ENABLE_X64, JAX_DEFAULT_MATMUL_PRECISION, JAX_NUMPY_RANK_PROMOTION, ...)
# silently loses that configuration.
# MODES: run install guard
import os, sys

if os.environ.get("TG_MODE") == "install":  # the docs' "first thing in your entry point"
    import typecheck_guard
    typecheck_guard.install()
if os.environ.get("TG_MODE") == "guard":  # runtime-guard docs: "before your jitted functions"
    import typecheck_guard
    typecheck_guard.runtime_checks("log")

os.environ["JAX_ENABLE_X64"] = "1"
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, jax.numpy as jnp

print("x64 enabled", jax.config.jax_enable_x64)
print("default float dtype", jnp.ones(1).dtype)
print("int dtype", jnp.arange(3).dtype)
try:
    jnp.ones((2, 3)) + jnp.ones(3)
    print("rank promotion allowed")
except Exception as e:
    print("rank promotion", type(e).__name__)
