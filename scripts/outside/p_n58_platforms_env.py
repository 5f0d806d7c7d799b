# New (eager-import family): JAX_PLATFORMS set by the program after install() (or under
# `typecheck-guard run`) is ignored: JAX already read it.  Shown on CPU by asking for a platform
# this machine lacks -- plain JAX refuses, with the plugin JAX silently uses the CPU.  On a GPU
# machine the same code with JAX_PLATFORMS="cpu" would run on the GPU.
# MODES: install run
import os

if os.environ.get("TG_MODE") == "install":
    import typecheck_guard
    typecheck_guard.install()

os.environ["JAX_PLATFORMS"] = "tpu"
import jax

try:
    print("backend", jax.default_backend())
except Exception as e:
    print("backend init failed:", type(e).__name__)
