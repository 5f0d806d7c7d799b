# Region: constructions inside host callbacks during a jitted call, under jax.disable_jit(),
# and JAX calling the class as a function (tree.map(S, xs), jit(S), vmap(S), eval_shape(S)).
# MODES: install wrap block
import common
from common import show, cbeartype
import numpy as np, jax, jax.numpy as jnp
from jax.experimental import io_callback
from flax import struct
from jaxtyping import Array, Float, jaxtyped

LOG = []


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]


def try_build(v):
    try:
        S(jnp.asarray(v).astype(jnp.int32))  # bad dtype
        LOG.append("cb bad: passed")
    except Exception as e:
        LOG.append("cb bad: " + type(e).__name__)
    return np.zeros((), np.float32)


def step(s):
    jax.debug.callback(try_build, s.x)
    y = jax.pure_callback(try_build, jax.ShapeDtypeStruct((), jnp.float32), s.x)
    z = io_callback(try_build, jax.ShapeDtypeStruct((), jnp.float32), s.x, ordered=True)
    return S(s.x + y + z)


def main():
    j = common.jit(step)
    s = S(jnp.ones(2))
    for i in range(3):
        LOG.clear()
        show(f"call {i}", lambda: j(s), count=False)
        jax.effects_barrier()
        show(f"callback log {i}", lambda: sorted(LOG), count=False)
    with jax.disable_jit():
        show("disable_jit bad", lambda: common.jit(lambda v: S(v))(jnp.ones(2, jnp.int32)))
        show("disable_jit good", lambda: common.jit(lambda v: S(v))(jnp.ones(2)))
    show("tree.map(S) bad", lambda: jax.tree.map(S, [jnp.ones(2, jnp.int32)]))
    show("jit(S) bad", lambda: common.jit(S)(jnp.ones(2, jnp.int32)))
    show("vmap(S) bad", lambda: jax.vmap(S)(jnp.ones((2, 2), jnp.int32)))
    show("eval_shape(S) bad", lambda: jax.eval_shape(S, jnp.ones(2, jnp.int32)))
    show("eval_shape(lambda) bad", lambda: jax.eval_shape(lambda: S(jnp.ones(2, jnp.int32))))
    show("jit lambda bad", lambda: common.jit(lambda: S(jnp.ones(2, jnp.int32)))())
    show("scan body bad", lambda: jax.lax.scan(lambda c, v: (c, S(v)), 0, jnp.ones((2, 2), jnp.int32)))
    show("grad through S", lambda: jax.grad(lambda v: S(v).x.sum())(jnp.ones(2)).tolist())

common.main(main)
