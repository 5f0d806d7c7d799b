# New: the PyTree verdict cache (on with install()) replays dimension bindings: a pass
# cached in one memo state, replayed in another.
# MODES: install
import common
from common import show
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, Shaped, PyTree, jaxtyped

T = PyTree[Float[Array, "n"]]


@jaxtyped(typechecker=beartype)
def a_then_t(a: Float[Array, "n"], t: T):  # n bound by a; t only compared
    return "ok"


@jaxtyped(typechecker=beartype)
def t_then_b(t: T, b: Float[Array, "n"]):  # t binds n; b compared
    return "ok"


@jaxtyped(typechecker=beartype)
def two(t: T, u: PyTree[Float[Array, "m n"]]):
    return "ok"


@jaxtyped(typechecker=beartype)
def star(t: PyTree[Float[Array, "*b n"]], c: Float[Array, "*b"]):
    return "ok"


@jaxtyped(typechecker=beartype)
def struct(t: PyTree[Float[Array, "n"], "T"], u: PyTree[Float[Array, "..."], "T"]):
    return "ok"


@jaxtyped(typechecker=beartype)
def bcast(t: PyTree[Float[Array, "#n"]], b: Float[Array, "n"]):
    return "ok"


@jaxtyped(typechecker=beartype)
def sym(t: PyTree[Float[Array, "n"]], b: Float[Array, "n+1"]):
    return "ok"


def main():
    x3, x4 = jnp.ones(3), jnp.ones(4)
    show("a_then_t pass", lambda: a_then_t(x3, {"k": x3}))
    show("t_then_b mismatch", lambda: t_then_b({"k": x3}, x4))
    show("t_then_b pass", lambda: t_then_b({"k": x3}, x3))
    show("a_then_t mismatch", lambda: a_then_t(x4, {"k": x3}))
    show("two pass", lambda: two({"k": x3}, {"k": jnp.ones((2, 3))}))
    show("two mismatch", lambda: two({"k": x4}, {"k": jnp.ones((2, 3))}))
    show("two mismatch2", lambda: two({"k": x3}, {"k": jnp.ones((2, 4))}))
    show("star pass", lambda: star([jnp.ones((2, 3))], jnp.ones(2)))
    show("star mismatch", lambda: star([jnp.ones((2, 3))], jnp.ones(5)))
    show("struct pass", lambda: struct([x3], [x4]))
    show("struct mismatch", lambda: struct([x3], [x4, x4]))
    show("struct mismatch2", lambda: struct([x3], ({"a": x4},)))
    show("bcast pass", lambda: bcast([jnp.ones(1), x3], x3))
    show("bcast mismatch", lambda: bcast([jnp.ones(1), x3], x4))
    show("bcast 1 only", lambda: bcast([jnp.ones(1)], x4))
    show("bcast 1 only again", lambda: bcast([jnp.ones(1)], x3))
    show("sym pass", lambda: sym([x3], x4))
    show("sym mismatch", lambda: sym([x3], x3))
    # isinstance outside a jaxtyped function
    show("isinstance", lambda: (isinstance({"k": x3}, T), isinstance({"k": x3, "j": x4}, T)))
    show("a_then_t after isinstance", lambda: a_then_t(x4, {"k": x3}))

common.main(main)
