# Family B7 (jaxtyping features): dimension memo across nested @jaxtyped calls (a node built and
# rebuilt inside a @jaxtyped function binds/clashes "n"), PyTree[Float[Array,"n"], "T"]
# structure names, jaxtyped("context").  Claim attacked: checks by a checker not under a
# @jaxtyped of their own still bind the enclosing memo; structure names behave as plain.
# MODES: install block wrap
import common
from common import show, cbeartype
import dataclasses
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, PyTree, jaxtyped
from flax import struct


@beartype  # not under a @jaxtyped of its own: resolves "n" in the caller's memo
@struct.dataclass
class Loose:
    x: Float[Array, " n"]


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class Own:
    x: Float[Array, " n"]


@jaxtyped(typechecker=beartype)
def use_loose(a: Float[Array, " n"], l: Loose) -> Float[Array, " n"]:
    m = jax.tree.map(lambda v: jnp.concatenate([v, v]), l)  # rebuild with 2n: plain binds/clashes
    return a


@jaxtyped(typechecker=beartype)
def use_own(a: Float[Array, " n"], o: Own) -> Float[Array, " n"]:
    m = jax.tree.map(lambda v: jnp.concatenate([v, v]), o)
    return a + m.x[: a.shape[0]]


@jaxtyped(typechecker=beartype)
def same_T(a: PyTree[Float[Array, " n"], "T"], b: PyTree[Float[Array, " n"], "T"]) -> int:
    return 1


@jaxtyped(typechecker=beartype)
def nested_memo(a: Float[Array, " n"]) -> Float[Array, " n"]:
    o = Own(jnp.ones(a.shape[0] + 1))  # Own has its own memo: n free there
    l = Loose(jnp.ones(a.shape[0] + 1))  # Loose: binds in this memo -> clash
    return a


def main():
    l = Loose(jnp.ones(3))
    o = Own(jnp.ones(3))
    show("use_loose", lambda: use_loose(jnp.ones(3), l))
    show("use_own", lambda: use_own(jnp.ones(3), o))
    show("jit use_loose", lambda: common.jit(use_loose)(jnp.ones(3), l))
    show("jit use_own", lambda: common.jit(use_own)(jnp.ones(3), o))
    show("same_T ok", lambda: same_T(o, jax.tree.map(lambda v: v * 2, o)))
    show("same_T other class", lambda: same_T(o, l))
    show("same_T rebuilt list", lambda: same_T([o.x], jax.tree.map(lambda v: v, [o.x])))
    show("nested_memo", lambda: nested_memo(jnp.ones(2)))
    with jaxtyped("context"):
        show("context rebuild", lambda: jax.tree.map(lambda v: jnp.ones(4), (Loose(jnp.ones(2)), Loose(jnp.ones(2)))))
        show("context build clash", lambda: (Loose(jnp.ones(2)), Loose(jnp.ones(5))))
    with jaxtyped("context"):
        show("context rebuild then build", lambda: (jax.tree.map(lambda v: jnp.ones(4), Loose(jnp.ones(4))), Loose(jnp.ones(5))))


common.main(main)
