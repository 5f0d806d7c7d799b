# New: unflatten_safe's cache of passed checks (row 7, inside `with unflatten_safe():`):
# keys that do not decide the check: 1 == True == 1.0 (static fields compared with ==,
# Python scalars by value), numpy scalars, outer jaxtyping memo.
# MODES: block install
import common
from common import show
import dataclasses
from typing import Literal
import numpy as np, jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]
    flag: bool = struct.field(pytree_node=False, default=False)
    scale: float = struct.field(pytree_node=False, default=1.0)
    lit: Literal[1, 2] = struct.field(pytree_node=False, default=1)
    count: int = struct.field(pytree_node=False, default=0)


@jaxtyped(typechecker=beartype)
@struct.dataclass
class D:  # the same annotations on data fields (Python scalars are leaves)
    flag: bool
    scale: float
    lit: Literal[1, 2]
    count: int
    name: Literal["a", "b"] = "a"


def main():
    x = jnp.ones(2)
    show("S static good", lambda: S(x, flag=True, scale=1.0, lit=1, count=1).flag)
    show("S static flag=1", lambda: S(x, flag=1, scale=1.0, lit=1, count=1).flag)
    show("S static scale=1", lambda: S(x, flag=True, scale=1, lit=1, count=1).scale)
    show("S static lit=1.0", lambda: S(x, flag=True, scale=1.0, lit=1.0, count=1).lit)
    show("S static lit=True", lambda: S(x, flag=True, scale=1.0, lit=True, count=1).lit)
    show("S static count=np.int64", lambda: S(x, flag=True, scale=1.0, lit=1, count=np.int64(1)).count)
    show("S static count=1.0", lambda: S(x, flag=True, scale=1.0, lit=1, count=1.0).count)
    show("D good", lambda: D(True, 1.0, 1, 1).flag)
    show("D flag=1", lambda: D(1, 1.0, 1, 1).flag)
    show("D scale=1", lambda: D(True, 1, 1, 1).scale)
    show("D lit=1.0", lambda: D(True, 1.0, 1.0, 1).lit)
    show("D count=np.int64", lambda: D(True, 1.0, 1, np.int64(1)).count)
    show("D count=True", lambda: D(True, 1.0, 1, True).count)
    show("D name np.str_ a", lambda: D(True, 1.0, 1, 1, np.str_("a")).name)
    show("D name np.str_ z", lambda: D(True, 1.0, 1, 1, np.str_("z")).name)
    show("D lit np.int64(1)", lambda: D(True, 1.0, np.int64(1), 1).lit)
    show("D lit np.int64(3)", lambda: D(True, 1.0, np.int64(3), 1).lit)
    show("D scale np.float64(1)", lambda: D(True, np.float64(1.0), 1, 1).scale)
    show("D scale np.float32(1)", lambda: D(True, np.float32(1.0), 1, 1).scale)

common.main(main)
