# New (same family as p_n52): JAXTYPING_DISABLE set by the program before it imports jaxtyping
# (the FAQ's production switch) is ignored under install() / `typecheck-guard run`, because
# jaxtyping was already imported: checks the plain run never makes now raise.
# MODES: run install
import os

if os.environ.get("TG_MODE") == "install":
    import typecheck_guard
    typecheck_guard.install()

os.environ["JAXTYPING_DISABLE"] = "1"
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped
import jaxtyping


@jaxtyped(typechecker=beartype)
def f(x: Float[Array, "n"]):
    return "ran"


print("config", jaxtyping.config.jaxtyping_disable)
try:
    print("bad call:", f(jnp.ones((2, 2), jnp.int32)))
except Exception as e:
    print("bad call raised", type(e).__name__)
