# New region: the object.__new__ fast path's "provably the same object" conditions.
# Descriptor fields, init=False default_factory side effects, a non-checker decorator
# (functools.wraps) on an empty __post_init__ / on __init__, __getattribute__ reads in flatten.
# MODES: install
import common
from common import show, cbeartype
import dataclasses, functools, jax, jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, jaxtyped

LOG = []


class Desc:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return 0.0  # the dataclass default
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        LOG.append("desc set")
        object.__setattr__(obj, self.name, value * 1)


@jax.tree_util.register_dataclass
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class WithDesc:
    x: Float[Array, "n"] = Desc()


def factory():
    LOG.append("factory")
    return len(LOG)


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class WithFactory:
    x: Float[Array, "n"]
    k: int = dataclasses.field(init=False, default_factory=factory)


jax.tree_util.register_dataclass(WithFactory, data_fields=["x"], meta_fields=[])


def logged(fn):
    @functools.wraps(fn)
    def w(*a, **k):
        LOG.append("logged " + fn.__name__)
        return fn(*a, **k)
    return w


@jax.tree_util.register_dataclass
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class WrappedPost:
    x: Float[Array, "n"]

    @logged
    def __post_init__(self):
        pass


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class WrappedInit0:
    x: Float[Array, "n"]


WrappedInit0.__init__ = logged(WrappedInit0.__init__)
WrappedInit = jax.tree_util.register_dataclass(WrappedInit0)


class Getattr:
    def __getattribute__(self, name):
        if not name.startswith("__"):
            LOG.append("get " + name)
        return object.__getattribute__(self, name)


@jax.tree_util.register_dataclass
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class WithGetattr(Getattr):
    x: Float[Array, "n"]
    y: Float[Array, "n"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FrozenDesc:
    x: jax.Array = Desc()


def run(name, obj):
    LOG.clear()
    r = show(f"{name} tree.map", lambda: jax.tree.map(lambda v: v + 1, obj), count=False)
    show(f"{name} log", lambda: list(LOG), count=False)
    LOG.clear()
    show(f"{name} flatten", lambda: len(jax.tree.leaves(obj)), count=False)
    show(f"{name} flatten log", lambda: list(LOG), count=False)
    LOG.clear()
    r2 = jax.tree.map(lambda v: v, obj)
    show(f"{name} vars", lambda: sorted(vars(r2)) if hasattr(r2, "__dict__") else None, count=False)
    show(f"{name} rebuilt log", lambda: list(LOG), count=False)


def main():
    run("desc", WithDesc(jnp.ones(2)))
    run("factory", WithFactory(jnp.ones(2)))
    run("wrapped post", WrappedPost(jnp.ones(2)))
    run("wrapped init", WrappedInit(jnp.ones(2)))
    run("getattr", WithGetattr(jnp.ones(2), jnp.ones(2)))
    run("frozen desc", FrozenDesc(jnp.ones(2)))

common.main(main)
