# Region: the object.__new__ fast path's conditions when the relevant method is INHERITED
# (__post_init__ doing work, custom __new__, non-frozen __setattr__, metaclass __call__,
# __init_subclass__ hooks) -- the rebuilt object must be what cls(**fields) builds.
# MODES: install
import common
from common import show
import dataclasses, jax, jax.numpy as jnp
from flax import struct

LOG = []


@struct.dataclass
class PostBase:
    x: jax.Array

    def __post_init__(self):
        LOG.append("post")
        object.__setattr__(self, "total", float(jnp.sum(self.x)) if not isinstance(self.x, jax.core.Tracer) else 0.0)


@struct.dataclass
class PostChild(PostBase):
    y: jax.Array = None


class NewMixin:
    def __new__(cls, *args, **kwargs):
        LOG.append("new")
        obj = super().__new__(cls)
        object.__setattr__(obj, "born", "via __new__")
        return obj


@struct.dataclass
class NewChild(NewMixin):
    x: jax.Array


class SetMixin:
    def __setattr__(self, name, value):
        LOG.append("setattr " + name)
        object.__setattr__(self, name, value)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class SetChild(SetMixin):
    x: jax.Array


class Meta(type):
    def __call__(cls, *a, **k):
        LOG.append("meta call")
        obj = super().__call__(*a, **k)
        obj.__dict__["stamp"] = "meta"
        return obj


class MetaBase(metaclass=Meta):
    pass


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class MetaChild(MetaBase):
    x: jax.Array


class InitMixin:
    def __init__(self, x):
        LOG.append("mixin init")
        self.x = x * 1
        self.extra = "mixin"


@dataclasses.dataclass(init=False)
class InitChild(InitMixin):
    x: jax.Array


jax.tree_util.register_dataclass(InitChild, data_fields=["x"], meta_fields=[])


@dataclasses.dataclass
class GrandBase:
    x: jax.Array

    def __post_init__(self):
        LOG.append("grand post")
        self.derived = 1


@dataclasses.dataclass
class Mid(GrandBase):
    pass


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Leaf(Mid):
    pass


def main():
    x = jnp.ones(2)
    for name, o in [("PostChild", PostChild(x)), ("NewChild", NewChild(x)), ("SetChild", SetChild(x)),
                    ("MetaChild", MetaChild(x)), ("InitChild", InitChild(x)), ("Leaf", Leaf(x))]:
        LOG.clear()
        r = jax.tree.map(lambda v: v + 1, o)
        show(f"{name} map log", lambda: list(LOG), count=False)
        show(f"{name} map attrs", lambda: sorted(vars(r)), count=False)
        LOG.clear()
        r2 = jax.jit(lambda v: v)(o)
        show(f"{name} jit attrs", lambda: sorted(vars(r2)), count=False)
        show(f"{name} jit log has work", lambda: sorted(set(LOG)), count=False)

common.main(main)
