# New region: marks are per thread.  Thread A is inside JAX's unflatten of C (its __init__
# body waits); thread B builds a bad C and a good C meanwhile: B's checks must run.
# Also: a bad construction in B while A does C's *first* unflatten (guards going in).
# MODES: install block
import common
from common import show, cbeartype
import threading, jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped

go, entered = threading.Event(), threading.Event()


@jax.tree_util.register_pytree_node_class
class C:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"], wait: bool = False):
        self.x, self.wait = x, wait
        if wait:
            entered.set()
            go.wait(10)

    def tree_flatten(self):
        return (self.x,), self.wait

    @classmethod
    def tree_unflatten(cls, wait, ch):
        return cls(ch[0], wait)


def main():
    results = {}
    c = C(jnp.ones(2), False)
    object.__setattr__(c, "wait", True) if False else setattr(c, "wait", True)

    def a():
        results["a"] = type(jax.tree.map(lambda v: v, c)).__name__

    ta = threading.Thread(target=a)
    ta.start()
    entered.wait(10)
    show("B bad while A unflattens", lambda: C(jnp.ones((2, 2))))
    show("B good while A unflattens", lambda: C(jnp.ones(2)).x.tolist())
    go.set()
    ta.join()
    show("A result", lambda: results["a"], count=False)
    show("after bad", lambda: C(jnp.ones((2, 2))))

common.main(main)
