# Row-1 evidence, "functions its code names ... found when the class is registered":
#  A  a spare instance built by a named helper / by tree_unflatten itself (values NOT from children)
#  B  the global `build` rebound after registration (to code building a spare)
#  C  a class attribute (`cls._make`) replaced after registration
#  D  recursion: a node holding a node of the same class; outer unflatten builds a fresh inner one
#  E  super() / classmethods on registered subclasses; a spare of the BASE class from Sub.create
#  F  another registered class built by a named helper / through Inner.tree_unflatten
# Verdict lines (bad values) are compared; INFO lines (checks run by the rebuild itself,
# expected to drop with install()) are not compared.
# MODES: install
import common
from common import show, out, cbeartype, CHECKS
import dataclasses
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped

BAD = "not an array"
FLAG = {"spare": False, "fresh_inner": False}


def attempt(label, thunk):
    try:
        thunk()
        return "built"
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


SPARES = []


def node_cls(name):
    @jaxtyped(typechecker=cbeartype)
    @dataclasses.dataclass
    class K:
        value: Float[Array, " n"]
        unit: str

        def tree_flatten(self):
            return (self.value,), self.unit

    K.__name__ = K.__qualname__ = name
    return K


# ---- A: spare in a named helper, spare directly in tree_unflatten
def build(v, u):
    if FLAG["spare"]:
        SPARES.append(attempt("spare", lambda: A1(BAD, "spare")))
    return A1(v, u)


A1 = node_cls("A1")
A1.tree_unflatten = classmethod(lambda cls, u, ch: build(ch[0], u))  # lambda names `build`


class A2(node_cls("A2base")):
    @classmethod
    def tree_unflatten(cls, u, ch):
        if FLAG["spare"]:
            SPARES.append(attempt("spare", lambda: cls(BAD, "spare")))
        return cls(ch[0], u)


jax.tree_util.register_pytree_node_class(A1)
jax.tree_util.register_pytree_node_class(A2)


# ---- B: global rebound after registration
def make_b(v, u):
    return B(v, u)


def make_b_with_spare(v, u):
    SPARES.append(attempt("spare", lambda: B(BAD, "spare")))
    return B(v, u)


@jax.tree_util.register_pytree_node_class
class B(node_cls("Bbase")):
    @classmethod
    def tree_unflatten(cls, u, ch):
        return make_b(ch[0], u)


# ---- C: class attribute replaced after registration
@jax.tree_util.register_pytree_node_class
class C(node_cls("Cbase")):
    @classmethod
    def _make(cls, v, u):
        return cls(v, u)

    @classmethod
    def tree_unflatten(cls, u, ch):
        return cls._make(ch[0], u)


def c_make_with_spare(cls, v, u):
    SPARES.append(attempt("spare", lambda: cls(BAD, "spare")))
    return cls(v, u)


# ---- D: recursion
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class D:
    value: Float[Array, " n"]
    child: object  # a D or None

    def tree_flatten(self):
        return (self.value, self.child), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        if FLAG["fresh_inner"]:  # outer builds a fresh inner D of the same class
            SPARES.append(attempt("fresh", lambda: cls(BAD, None)))
        return cls(ch[0], ch[1])


jax.tree_util.register_pytree_node_class(D)


# ---- E: super() / classmethods on subclasses
class EBase(node_cls("EBase0")):
    @classmethod
    def create(cls, v, u):
        return cls(v, u)

    @classmethod
    def tree_unflatten(cls, u, ch):
        return cls.create(ch[0], u)


jax.tree_util.register_pytree_node_class(EBase)


@jax.tree_util.register_pytree_node_class
class ESub(EBase):
    @classmethod
    def create(cls, v, u):
        if FLAG["spare"]:
            SPARES.append(attempt("base spare", lambda: EBase(BAD, "spare")))
            SPARES.append(attempt("super spare", lambda: super(ESub, cls).create(BAD, "spare")))
        return super().create(v, u)


@jax.tree_util.register_pytree_node_class
class ESub2(EBase):
    @classmethod
    def tree_unflatten(cls, u, ch):
        return super().tree_unflatten(u, ch)


# ---- F: another registered class
@jax.tree_util.register_pytree_node_class
class Inner(node_cls("Inner0")):
    @classmethod
    def tree_unflatten(cls, u, ch):
        return cls(ch[0], u)


def make_inner():
    return Inner(BAD, "i")


@jax.tree_util.register_pytree_node_class
class Outer(node_cls("Outer0")):
    @classmethod
    def tree_unflatten(cls, u, ch):
        if FLAG["spare"]:
            SPARES.append(attempt("inner via helper", make_inner))
            SPARES.append(attempt("Inner.tree_unflatten", lambda: Inner.tree_unflatten("i", (BAD,))))
        return cls(ch[0], u)


def rebuild(label, obj, fn=lambda v: v + 1):
    SPARES.clear()
    before = CHECKS["n"]
    FLAG["spare"] = True
    try:
        r = attempt(label, lambda: jax.tree.map(fn, obj))
    finally:
        FLAG["spare"] = False
    print(f"INFO {label} rebuild checks: {CHECKS['n'] - before}", flush=True)
    out(label + " rebuild", r)
    out(label + " spares", SPARES)


def main():
    x = jnp.ones(2)
    for K in (A1, A2, B, C, EBase, ESub, ESub2, Inner, Outer):
        jax.tree.map(lambda v: v, K(x, "u"))  # first unflatten
    jax.tree.map(lambda v: v, D(x, D(x, None)))

    rebuild("A1 helper spare", A1(x, "u"))
    rebuild("A2 direct spare", A2(x, "u"))

    global make_b
    rebuild("B before rebind", B(x, "u"))
    make_b = make_b_with_spare
    rebuild("B after rebind (spare)", B(x, "u"))

    C._make = classmethod(c_make_with_spare)
    rebuild("C attr replaced (spare)", C(x, "u"))

    rebuild("D nested plain", D(x, D(x, None)))
    rebuild("D nested ints (expected skip)", D(x, D(x, None)), fn=lambda v: v.astype(jnp.int32))
    FLAG["fresh_inner"] = True
    rebuild("D fresh inner", D(x, None))
    FLAG["fresh_inner"] = False

    rebuild("EBase", EBase(x, "u"))
    rebuild("ESub create->super", ESub(x, "u"))
    rebuild("ESub2 tree_unflatten->super", ESub2(x, "u"))

    rebuild("Outer builds Inner", Outer(x, "u"))

    for K in (A1, A2, B, C, D, EBase, ESub, ESub2, Inner, Outer):
        out(K.__name__ + "(bad) after", attempt("", lambda: K(BAD, "u") if K is not D else K(BAD, None)))


common.main(main)
