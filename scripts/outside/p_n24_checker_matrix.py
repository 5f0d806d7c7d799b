# Region: checker forms x registration routes x decorator order; constructions before and
# after the class's first unflatten must raise / pass / count the same.
# MODES: install
import common
from common import show, Counted
import dataclasses, itertools, jax, jax.numpy as jnp, chex
from beartype import beartype, BeartypeConf, BeartypeStrategy
from typeguard import typechecked
from flax import struct
from jaxtyping import Array, Float, jaxtyped

CA = Counted(jax.Array, "CA")

CHECKERS = {
    "jt-bt": jaxtyped(typechecker=beartype),
    "jt-tg": jaxtyped(typechecker=typechecked),
    "bt": beartype,
    "bt-On": beartype(conf=BeartypeConf(strategy=BeartypeStrategy.On)),
    "tg": typechecked,
}


def build(route, cname, where, order):
    chk = CHECKERS[cname]
    ns = dict(jax=jax, dataclasses=dataclasses, chex=chex, struct=struct, chk=chk, CA=CA, Float=Float, Array=Array)
    if route == "custom":
        init_dec = "@chk" if where == "init" else ""
        cls_dec = "@chk" if where == "class" else ""
        reg = "@jax.tree_util.register_pytree_node_class"
        decs = [reg, cls_dec] if order == "reg-above" else [cls_dec, reg]
        src = "\n".join(d for d in decs if d) + f"""
class C:
    {init_dec}
    def __init__(self, x: CA, k: int):
        self.x, self.k = x, k
    def tree_flatten(self):
        return (self.x,), self.k
    @classmethod
    def tree_unflatten(cls, k, ch):
        return cls(ch[0], k)
"""
    else:
        reg = {"rd": "@jax.tree_util.register_dataclass", "struct": "@struct.dataclass", "chex": "@chex.dataclass(mappable_dataclass=False)"}[route]
        dc = "@dataclasses.dataclass" if route == "rd" else ""
        if where == "init":
            return None
        decs = ["@chk", reg, dc] if order == "reg-below" else [reg, "@chk", dc]
        if route != "rd" and order == "reg-above":
            return None
        post = "    def __post_init__(self):\n        self.n = 1\n" if route == "chex" else \
               "    def __post_init__(self):\n        object.__setattr__(self, 'n', 1)\n"
        kfield = "    k: int = dataclasses.field(default=0, metadata=dict(static=True))\n" if route == "rd" else \
                 ("    k: int = struct.field(pytree_node=False, default=0)\n" if route == "struct" else "    k: CA = None\n")
        src = "\n".join(d for d in decs if d) + "\nclass C:\n    x: CA\n" + kfield + post
    exec(src, ns)
    return ns["C"]


def main():
    for route, cname, where, order in itertools.product(["custom", "rd", "struct", "chex"], CHECKERS, ["init", "class"], ["reg-above", "reg-below"]):
        try:
            C = build(route, cname, where, order)
        except Exception as e:
            show(f"{route} {cname} {where} {order} build", lambda: (_ for _ in ()).throw(e), count=False)
            continue
        if C is None:
            continue
        lab = f"{route} {cname} {where} {order}"
        k = jnp.ones(1) if route == "chex" else 1
        mk = (lambda x: C(x=x, k=k)) if route == "chex" else (lambda x: C(x, k=k))
        show(f"{lab} good", lambda: type(mk(jnp.ones(2))).__name__)
        show(f"{lab} bad", lambda: mk("bad"))
        show(f"{lab} unflatten", lambda: type(jax.tree.map(lambda v: v, mk(jnp.ones(2)))).__name__, count=False)
        show(f"{lab} good after", lambda: type(mk(jnp.ones(2))).__name__)
        show(f"{lab} bad after", lambda: mk("bad"))
        show(f"{lab} jit-trace bad", lambda: jax.jit(lambda v: mk(v))(object()) if False else jax.jit(lambda v: type(mk(v)).__name__ and 0)(jnp.ones(2)), count=False)

common.main(main)
