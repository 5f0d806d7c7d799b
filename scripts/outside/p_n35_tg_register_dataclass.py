# Region: typecheck_guard.register_dataclass ("same signature and field inference as
# jax.tree_util.register_dataclass") vs JAX's, for classes where __new__ + field writes is
# the same object (no __post_init__, generated __init__).  plain mode uses JAX's function.
# MODES: install
import common
from common import show
import dataclasses, pickle, jax, jax.numpy as jnp

if common.MODE == "plain":
    R = jax.tree_util.register_dataclass
else:
    import typecheck_guard
    R = typecheck_guard.register_dataclass


def probe(label, C, obj):
    show(f"{label} leaves", lambda: [l.tolist() if hasattr(l, "tolist") else l for l in jax.tree.leaves(obj)], count=False)
    show(f"{label} keypaths", lambda: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(obj)[0]], count=False)
    show(f"{label} node_data", lambda: jax.tree.structure(obj).node_data()[1], count=False)
    show(f"{label} rebuilt", lambda: repr(jax.tree.map(lambda v: v, obj)), count=False)
    show(f"{label} rebuilt vars", lambda: list(vars(jax.tree.map(lambda v: v, obj))) if hasattr(obj, "__dict__") else "slots", count=False)
    show(f"{label} jit", lambda: repr(jax.jit(lambda v: v)(obj)), count=False)
    show(f"{label} flatten_one_level", lambda: type(jax.tree_util.flatten_one_level(obj)[0]).__name__, count=False)
    show(f"{label} pickle treedef", lambda: pickle.loads(pickle.dumps(jax.tree.structure(obj))) == jax.tree.structure(obj), count=False)


def main():
    @dataclasses.dataclass
    class A:
        x: jax.Array
        m: int = dataclasses.field(default=1, metadata=dict(static=True))
    show("A ret", lambda: R(A).__name__, count=False)
    probe("A", A, A(jnp.ones(1), 2))

    @dataclasses.dataclass
    class B:
        x: jax.Array
        y: jax.Array
        m: str = "s"
    show("B ret", lambda: R(B, data_fields=["y", "x"], meta_fields=["m"]).__name__, count=False)
    probe("B", B, B(jnp.ones(1), jnp.zeros(1)))

    @dataclasses.dataclass
    class Cc:
        x: jax.Array
        k: int = dataclasses.field(init=False, default=5)
    show("C ret", lambda: R(Cc, data_fields=["x"], meta_fields=[]).__name__, count=False)
    probe("C", Cc, Cc(jnp.ones(1)))

    @dataclasses.dataclass
    class D:
        x: jax.Array
        d: int = 0
    show("D ret", lambda: R(D, data_fields=["x"], meta_fields=[], drop_fields=["d"]).__name__, count=False)
    probe("D", D, D(jnp.ones(1), 7))

    @dataclasses.dataclass(frozen=True, slots=True)
    class E:
        x: jax.Array
        m: int = dataclasses.field(default=0, metadata=dict(static=True))
    show("E ret", lambda: R(E).__name__, count=False)
    probe("E", E, E(jnp.ones(1), 3))

    @dataclasses.dataclass(kw_only=True)
    class F:
        x: jax.Array
        m: int = dataclasses.field(default=0, metadata=dict(static=True))
    show("F ret", lambda: R(F).__name__, count=False)
    probe("F", F, F(x=jnp.ones(1), m=3))

    class G:  # not a dataclass, explicit fields
        def __init__(self, x, m):
            self.x, self.m = x, m

        def __repr__(self):
            return f"G({self.x}, {self.m})"
    show("G ret", lambda: R(G, data_fields=["x"], meta_fields=["m"]).__name__, count=False)
    probe("G", G, G(jnp.ones(1), 3))

    @dataclasses.dataclass
    class H:
        x: jax.Array
    show("H errors missing", lambda: R(H, data_fields=[], meta_fields=[]), count=False)
    show("H errors non-dataclass no fields", lambda: R(type("Z", (), {})), count=False)

common.main(main)
