# Family-1 region: where the guard takes its signature from -- __init__(*args, **kwargs) with
# no named self, an explicit __signature__ that differs from the real call convention,
# string / future annotations naming classes defined later or locally.
# MODES: install
from __future__ import annotations
import common
from common import show, cbeartype
import inspect, jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

SEEN = []


def node(init):
    class C:
        __init__ = init

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, ch):
            return cls(ch[0])

    return jax.tree_util.register_pytree_node_class(C)


@beartype
def init_star(*args: object, **kwargs: object):
    self = args[0]
    self.x = args[1]
    SEEN.append((len(args), sorted(kwargs)))


def _real(self, x, scale=1.0):
    self.x = x
    SEEN.append(("real", scale))


checked_real = beartype(_real)


def init_sig(self, *args, **kwargs):  # exposes a friendlier signature than it accepts
    SEEN.append(("sig", args, sorted(kwargs)))
    return checked_real(self, *args, **kwargs)


init_sig.__signature__ = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                            inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                            inspect.Parameter("scale", inspect.Parameter.KEYWORD_ONLY, default=3.0)])
init_sig.__wrapped__ = _real


class Later:
    pass


@jaxtyped(typechecker=cbeartype)
def init_fwd(self, x: Float[Array, "n"], tag: Later | None = None):
    self.x = x
    SEEN.append(("fwd", tag))


def main():
    for name, init, args, kw in [("star", init_star, (jnp.ones(2),), {}), ("sig", init_sig, (jnp.ones(2),), {}),
                                 ("sig scale", init_sig, (jnp.ones(2), 2.0), {}),
                                 ("fwd", init_fwd, (jnp.ones(2),), {}), ("fwd tag", init_fwd, (jnp.ones(2),), {"tag": Later()})]:
        C = node(init)
        SEEN.clear()
        show(f"{name} before", lambda: (type(C(*args, **kw)).__name__, list(SEEN)))
        show(f"{name} unflatten", lambda: type(jax.tree.map(lambda v: v, C(jnp.ones(2)))).__name__, count=False)
        SEEN.clear()
        show(f"{name} after", lambda: (type(C(*args, **kw)).__name__, [s if not isinstance(s[-1], Later) else s[:-1] for s in SEEN]))

common.main(main)
