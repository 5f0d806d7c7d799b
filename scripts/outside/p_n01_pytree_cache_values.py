# New: the PyTree verdict cache (on with install()) keyed by structure + leaf type/shape/dtype:
# value-dependent annotations inside PyTree[...] (Literal, beartype validators, numpy scalars,
# a class whose __instancecheck__ reads values).
# MODES: install
import common
from common import show
from typing import Literal, Annotated
import numpy as np, jax, jax.numpy as jnp
from beartype import beartype
from beartype.vale import Is
from jaxtyping import Array, Float, PyTree, jaxtyped


class PosMeta(type):
    def __instancecheck__(cls, x):
        return isinstance(x, jax.Array) and bool((x > 0).all())


class Positive(metaclass=PosMeta):
    pass


@jaxtyped(typechecker=beartype)
def lit(t: PyTree[Literal["a", "b"]]):
    return "ok"


@jaxtyped(typechecker=beartype)
def lit_int(t: PyTree[Literal[1, 2]]):
    return "ok"


@jaxtyped(typechecker=beartype)
def vale(t: PyTree[Annotated[float, Is[lambda v: v > 0]]]):
    return "ok"


@jaxtyped(typechecker=beartype)
def pos(t: PyTree[Positive]):
    return "ok"


@jaxtyped(typechecker=beartype)
def boolean(t: PyTree[bool]):
    return "ok"


def main():
    show("lit good", lambda: lit({"k": "a"}))
    show("lit bad", lambda: lit({"k": "z"}))
    show("lit np good", lambda: lit({"k": np.str_("a")}))
    show("lit np bad", lambda: lit({"k": np.str_("z")}))
    show("lit_int good", lambda: lit_int([1]))
    show("lit_int bad", lambda: lit_int([3]))
    show("lit_int np good", lambda: lit_int([np.int64(1)]))
    show("lit_int np bad", lambda: lit_int([np.int64(3)]))
    show("vale good", lambda: vale([1.0]))
    show("vale bad", lambda: vale([-1.0]))
    show("vale np good", lambda: vale([np.float64(1.0)]))
    show("vale np bad", lambda: vale([np.float64(-1.0)]))
    show("pos good", lambda: pos([jnp.ones(2)]))
    show("pos bad", lambda: pos([-jnp.ones(2)]))
    show("isinstance lit", lambda: (isinstance(["a"], PyTree[Literal["a"]]), isinstance(["z"], PyTree[Literal["a"]])))
    show("isinstance pos", lambda: (isinstance([jnp.ones(1)], PyTree[Positive]), isinstance([-jnp.ones(1)], PyTree[Positive])))
    show("bool good", lambda: boolean([True]))
    show("bool 1", lambda: boolean([1]))

common.main(main)
