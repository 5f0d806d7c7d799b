import warnings
warnings.simplefilter("ignore")
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped
from flax import struct


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, " n"]


def job(kind):
    try:
        if kind == "good":
            return S(jnp.ones(2)).x.tolist()
        if kind == "bad":
            S("no")
            return "built"
        if kind == "replace_bad":
            S(jnp.ones(2)).replace(x=1)
            return "built"
        if kind == "jit":
            f = jax.jit(lambda s: s.replace(x=s.x + 1))
            return f(f(S(jnp.ones(2)))).x.tolist()
        if kind == "installed":
            import sys
            return "typecheck_guard" in sys.modules
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
