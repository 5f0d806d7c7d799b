# Family B4 (lifecycle): install(); define A; uninstall(); define B; install() again (twice);
# define C; uninstall(); re-register nothing.  Every user construction must stay checked, every
# tree op / jit / replace / pickle / treedef pickle must give plain's values.  (Plain mode runs
# the same class definitions with no typecheck_guard at all.)  Claim attacked: uninstall()
# "puts each function back exactly as it was"; re-install() is not documented to differ.
# MODES: install
import common
from common import show, out, cbeartype
import pickle, dataclasses
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped
from flax import struct

TG = None
if common.MODE == "install":
    import typecheck_guard as TG


def make(name):
    @jaxtyped(typechecker=cbeartype)
    @struct.dataclass
    class S:
        x: Float[Array, " n"]
        k: int = struct.field(pytree_node=False, default=1)

    S.__name__ = S.__qualname__ = name

    @jax.tree_util.register_pytree_node_class
    @jaxtyped(typechecker=cbeartype)
    @dataclasses.dataclass
    class N:
        x: Float[Array, " n"]

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, ch):
            return cls(*ch)

    N.__name__ = N.__qualname__ = name + "N"
    globals()[name] = S
    globals()[name + "N"] = N
    return S, N


A, AN = make("A")
if TG:
    TG.uninstall()
B, BN = make("B")
if TG:
    TG.install()
    TG.install()
C, CN = make("C")
if TG:
    TG.uninstall()
    TG.uninstall()
D, DN = make("D")
if TG:
    TG.install()


def main():
    for S, N in ((A, AN), (B, BN), (C, CN), (D, DN)):
        n = S.__name__
        s = S(jnp.ones(2))
        show(n + " tree.map", lambda: jax.tree.map(lambda v: v + 1, s))
        show(n + " jit", lambda: common.jit(lambda q: q.replace(x=q.x * 2))(s))
        show(n + " bad", lambda: S("no"))
        show(n + " replace bad", lambda: s.replace(x="no"))
        show(n + " N tree.map", lambda: jax.tree.map(lambda v: v + 1, N(jnp.ones(2))))
        show(n + " N bad", lambda: N("no"))
        td = jax.tree.structure(s)
        show(n + " treedef pickle", lambda: str(pickle.loads(pickle.dumps(td))))
        show(n + " treedef eq after pickle", lambda: pickle.loads(pickle.dumps(td)) == td)
        show(n + " pickle obj", lambda: pickle.loads(pickle.dumps(s)))
        show(n + " keypaths", lambda: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(s)[0]])
        show(n + " unflatten(treedef, ints) type", lambda: type(jax.tree.unflatten(td, [jnp.ones(2)])).__name__)


common.main(main)
