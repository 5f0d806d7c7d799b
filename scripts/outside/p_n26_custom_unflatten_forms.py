# Region: the wrapped unflatten of custom nodes -- what the user's unflatten receives
# (children container, aux identity), callable objects / partials / bound methods, state read
# at call time, replacement of tree_unflatten after registration, flatten_with_keys forms.
# MODES: install
import common
from common import show, cbeartype
import functools, jax, jax.numpy as jnp
from jax import tree_util as tu
from jaxtyping import Array, Float, jaxtyped

SEEN = []


class Base:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"], tag: object = None):
        self.x, self.tag = x, tag


AUX = {"k": 1}


class ByObj(Base):
    pass


class Unf:
    def __init__(self):
        self.mode = "first"

    def __call__(self, aux, ch):
        SEEN.append(("obj", self.mode, type(ch).__name__, aux is AUX))
        return ByObj(ch[0], self.mode)


unf = Unf()
tu.register_pytree_node(ByObj, lambda o: ((o.x,), AUX), unf)


class ByPartial(Base):
    pass


def pu(extra, aux, ch):
    SEEN.append(("partial", extra, type(ch).__name__))
    return ByPartial(ch[0], extra)


tu.register_pytree_node(ByPartial, lambda o: ((o.x,), None), functools.partial(pu, "E"))


@tu.register_pytree_node_class
class Late(Base):
    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        SEEN.append(("late", "original", type(ch).__name__))
        return cls(ch[0], "original")


class WithKeys(Base):
    pass


tu.register_pytree_with_keys(WithKeys, lambda o: (((tu.GetAttrKey("x"), o.x),), None),
                             lambda aux, ch: (SEEN.append(("keys", type(ch).__name__)), WithKeys(ch[0], "k"))[1])


@tu.register_pytree_with_keys_class
class WithKeysCls(Base):
    def tree_flatten_with_keys(self):
        return ((tu.DictKey("x"), self.x),), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        SEEN.append(("keyscls", type(ch).__name__))
        return cls(ch[0], "kc")


class Many(Base):
    pass


tu.register_pytree_node(Many, lambda o: ((o.x, o.x, o.x), None), lambda aux, ch: (SEEN.append(("many", type(ch).__name__, len(ch))), Many(ch[0], "m"))[1])


def go(label, o):
    SEEN.clear()
    show(f"{label} tree.map", lambda: (jax.tree.map(lambda v: v, o).tag, list(SEEN)), count=False)
    SEEN.clear()
    show(f"{label} jit", lambda: (jax.jit(lambda v: v)(o).tag, list(SEEN)), count=False)
    SEEN.clear()
    leaves, td = jax.tree.flatten(o)
    show(f"{label} unflatten list", lambda: (jax.tree.unflatten(td, list(leaves)).tag, list(SEEN)), count=False)
    SEEN.clear()
    show(f"{label} unflatten tuple", lambda: (td.unflatten(tuple(leaves)).tag, list(SEEN)), count=False)
    SEEN.clear()
    show(f"{label} unflatten gen", lambda: (td.unflatten(iter(leaves)).tag, list(SEEN)), count=False)
    show(f"{label} keypaths", lambda: [tu.keystr(p) for p, _ in tu.tree_flatten_with_path(o)[0]], count=False)
    show(f"{label} flatten_one_level", lambda: (lambda r: (type(r[0]).__name__, r[1] is AUX if r[1] is not None else None))(tu.flatten_one_level(o)), count=False)
    show(f"{label} bad construct", lambda: type(o)("bad"))


def main():
    x = jnp.ones(2)
    go("obj", ByObj(x))
    unf.mode = "second"  # state read at call time
    go("obj2", ByObj(x))
    Unf.__call__ = lambda self, aux, ch: (SEEN.append(("replaced __call__",)), ByObj(ch[0], "replaced"))[1]
    go("obj3", ByObj(x))
    go("partial", ByPartial(x))
    go("late", Late(x))
    Late.tree_unflatten = classmethod(lambda cls, aux, ch: (SEEN.append(("late", "replaced")), cls(ch[0], "replaced"))[1])
    go("late-replaced", Late(x))
    go("withkeys", WithKeys(x))
    go("withkeyscls", WithKeysCls(x))
    go("many", Many(x))

common.main(main)
