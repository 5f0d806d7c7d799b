# Family 1 region (re-binding): what the checked __init__'s body receives, for each
# signature shape, before and after the class's first unflatten.
# MODES: install
import common
from common import show, cbeartype
import functools, inspect, jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

SEEN = []


def node(init, checker):
    ns = {}

    class C:
        __init__ = checker(init)

        def tree_flatten(self):
            return (self.x,), self.rest

        @classmethod
        def tree_unflatten(cls, aux, ch):
            a, k = aux
            return cls(ch[0], *a, **dict(k))

    return jax.tree_util.register_pytree_node_class(C)


def rec(self, x, args, kwargs):
    self.x = x
    self.rest = (tuple(args), tuple(sorted(kwargs.items())))
    SEEN.append(self.rest)


def i_posonly(self, x: Float[Array, "n"], a: int = 1, /, b: int = 2, *, c: int = 3):
    rec(self, x, (a,), {"b": b, "c": c})
    SEEN.append(("locals", a, b, c))


def i_star(self, x: Float[Array, "n"], *args: int, **kwargs: int):
    rec(self, x, args, kwargs)


def i_mut(self, x: Float[Array, "n"], acc: list = []):
    acc.append(1)
    rec(self, x, (), {})
    SEEN.append(("acc", len(acc)))


def i_kwonly(self, x: Float[Array, "n"], *, k: int):
    rec(self, x, (), {"k": k})


def i_locals(self, x: Float[Array, "n"], a: int = 1, b: int = 2):
    rec(self, x, (), {})
    SEEN.append(("frame-locals", sorted(inspect.currentframe().f_locals)))


def main():
    for cname, checker in [("jaxtyped", jaxtyped(typechecker=cbeartype)), ("beartype", beartype)]:
        for init, calls in [
            (i_posonly, [((), {}), ((5,), {}), ((5, 6), {}), ((5,), {"b": 7, "c": 8})]),
            (i_star, [((), {}), ((1, 2), {}), ((1,), {"z": 3})]),
            (i_mut, [((), {}), ((), {})]),
            (i_kwonly, [((), {"k": 1})]),
            (i_locals, [((), {}), ((1,), {})]),
        ]:
            C = node(init, checker)
            for phase in ["before", "after"]:
                for a, k in calls:
                    SEEN.clear()
                    show(f"{cname} {init.__name__} {phase} {a} {k}", lambda: (C(jnp.ones(2), *a, **k), list(SEEN))[1])
                if phase == "before":
                    show(f"{cname} {init.__name__} first unflatten", lambda: type(jax.tree.map(lambda v: v, C(jnp.ones(2), *calls[-1][0], **calls[-1][1]))).__name__)
            show(f"{cname} {init.__name__} bad posonly-as-kw", lambda: C(jnp.ones(2), a=1))

common.main(main)
