# Known family 1: parameter names colliding with the guard's own names (custom node route, guarded __init__).
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped

NAMES = ["self", "type", "mark", "building", "cls", "args", "kwargs", "fn", "func", "wrapped", "init",
         "obj", "instance", "check", "checked", "guard", "orig", "original", "method", "owner", "key",
         "state", "tls", "local", "marks", "call", "_self", "__self", "kw", "name", "__class__",
         "_tg_mark", "__tg", "_", "__wrapped__", "target", "inner", "outer", "skip", "frame", "token", "_tg_state", "__tracebackhide__", "bound", "memos"]


def make(name):
    ns = {}
    src = f"""
@jax.tree_util.register_pytree_node_class
class C:
    @jaxtyped(typechecker=cbeartype)
    def __init__(this, x: Float[Array, "n"], {name}: int = 0):
        this.x = x
        this.v = {name}

    def tree_flatten(this):
        return (this.x,), this.v

    @classmethod
    def tree_unflatten(klass, aux, ch):
        return klass(ch[0], aux)
"""
    exec(src, dict(jax=jax, jaxtyped=jaxtyped, cbeartype=cbeartype, Float=Float, Array=Array), ns)
    return ns["C"]


def main():
    for name in NAMES:
        C = make(name)
        show(f"{name} first unflatten", lambda: jax.tree.map(lambda v: v, C(jnp.ones(2), 3)).v)
        show(f"{name} kw", lambda: C(jnp.ones(2), **{name: 5}).v)
        show(f"{name} pos", lambda: C(jnp.ones(2), 5).v)
        show(f"{name} kw bad", lambda: C(jnp.ones(2), **{name: "s"}))
        show(f"{name} x kw", lambda: C(x=jnp.ones(2), **{name: 5}).v)

common.main(main)
