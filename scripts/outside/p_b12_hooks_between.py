# Family B3b (constructor hooks the guard does not list): code between install()'s unflatten
# wrapper and the guarded __init__ that is neither __init__/__new__/__post_init__/__setattr__,
# and that builds ANOTHER instance of the same class: a data-descriptor field's __set__ (runs
# inside the generated __init__, or inside the fast-path field writes), a converter-like
# property setter, and the metaclass __call__ (p_b3).  Plain: that inner construction is
# checked (it is made inside a constructor).  Claim attacked: "A construction made inside a
# constructor (another instance of the same class ...) is checked".
# MODES: install
import common
from common import show, out, cbeartype
import dataclasses
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped
from flax import struct

SEEN = []
ARM = {"on": False}


class Audit:
    """Data descriptor: on set, builds a 'previous value' record of the same class (bad)."""

    def __set_name__(self, owner, name):
        self.owner, self.name = owner, "_" + name

    def __get__(self, obj, owner=None):
        return 0.0 if obj is None else getattr(obj, self.name)

    def __set__(self, obj, value):
        if ARM["on"]:
            ARM["on"] = False
            try:
                type(obj)("not an array")
                SEEN.append("built")
            except Exception as e:  # noqa: BLE001
                SEEN.append(type(e).__name__)
        object.__setattr__(obj, self.name, value)


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class D:
    x: Float[Array, " n"] = Audit()


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class DR:
    x: Float[Array, " n"] = Audit()


jax.tree_util.register_dataclass(DR, data_fields=["x"], meta_fields=[])


def main():
    for C in (D, DR):
        n = C.__name__
        c = C(jnp.ones(2))
        jax.tree.map(lambda v: v, c)
        SEEN.clear()
        ARM["on"] = True
        show(n + " tree.map", lambda: jax.tree.map(lambda v: v + 1, c), count=False)
        out(n + " descriptor's inner construction", SEEN)
        SEEN.clear()
        ARM["on"] = True
        show(n + " user construction", lambda: C(jnp.ones(2)), count=False)
        out(n + " descriptor's inner construction (user)", SEEN)


common.main(main)
