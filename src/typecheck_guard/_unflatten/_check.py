"""`typecheck_guard.check(tree)`: the check that an unflatten no longer runs, given
back on demand.

With `install()`, JAX's unflattens don't re-run a class's typecheck: that is the
point, and it is also what we give up, since a tree operation can build values the
check would reject (`jax.tree.map(lambda x: x.astype(jnp.int32), state)` returns an
int32 `State` where plain JAX raises). `check` re-runs, for every node of a registered
class in `tree`, exactly what plain JAX's unflatten of that node would run (the
library's own unflatten function: `cls(**fields)` for a dataclass, the user's
`tree_unflatten`, chex's `__new__` and `__post_init__`), with the node's own children
and auxiliary data, and with every guard checking as without us. The rebuilt objects
are dropped; the checker's own error propagates.
"""

from __future__ import annotations

from typing import Any, TypeVar

from . import _state
from ._guards import register_barrier
from ._records import builds_with_new

__all__ = ["check"]

_T = TypeVar("_T")


def _plain_unflatten(entry: Any) -> Any:
    """The unflatten plain JAX would call for a registry entry: for one of ours, the
    function we wrapped or stood in for (`__typecheck_guard_plain__`)."""
    fn = getattr(entry, "from_iter", None)
    return getattr(fn, "__typecheck_guard_plain__", fn)


def _rebuild(reg: Any, node: Any, aux: Any, children: list[Any]) -> Any:
    """What JAX's unflatten builds for `node`'s place from its rebuilt `children`:
    a registered class through the unflatten plain JAX would call (its check, as
    without us), anything else (a tuple, a dict, a namedtuple, `None`) as JAX
    builds it, from a treedef of that one level."""
    import jax

    entry = reg.get(type(node))
    if entry is not None:
        if builds_with_new(type(node), entry.from_iter):
            return entry.from_iter(aux, children)  # no check in it: JAX's own
        return _plain_unflatten(entry)(aux, children)
    one_level = jax.tree_util.tree_structure(node, is_leaf=lambda x: x is not node)
    return jax.tree_util.tree_unflatten(one_level, children)


def check(tree: _T) -> _T:
    """Re-run the typecheck of every checked pytree node in `tree`, as JAX's own
    unflatten would have run it without `typecheck_guard`.

    After `install()`, rebuilding a tree (a jitted call's outputs, `jax.tree.map`,
    ...) does not re-run the checks of the classes in it. Call this where you want
    those checks back: on a state after a tree operation that may have changed its
    leaves' dtypes or shapes, or inside a jitted function (it then runs once, at
    trace time).

    **Arguments:**

    - `tree`: any pytree.

    **Returns:**

    `tree`, unchanged, so that `state = typecheck_guard.check(state)` reads well.

    **Raises:**

    The checker's own error (`jaxtyping.TypeCheckError`, beartype's, typeguard's
    `TypeError`) for the first node whose check fails, in the order JAX's unflatten
    runs them: a node's children (left to right) before the node.

    !!! Example

        ```python
        state = jax.tree.map(lambda x: x.astype(jnp.int32), state)
        typecheck_guard.check(state)  # raises: the fields are int32
        ```
    """
    __tracebackhide__ = True
    from .._compat._jax import flatten_one_level, registry

    reg = registry()
    with _state.clean():
        # JAX's unflatten, node by node, in its order: each node after its
        # children, left to right, built from the children as JAX rebuilt them (a
        # dict's keys sorted, say), so that each check sees what it would see
        # plain. A node's entry is `(node, None)` until its children are on the
        # stack, then `(node, (number of children, aux))`; `built` holds the
        # rebuilt subtrees waiting for their parent.
        stack: list[tuple[Any, Any]] = [(tree, None)]
        built: list[Any] = []
        while stack:
            node, level = stack.pop()
            if level is None:
                level = flatten_one_level(node)
                if level is None:  # a leaf
                    built.append(node)
                    continue
                children, aux = level
                children = list(children)
                stack.append((node, (len(children), aux)))
                stack.extend((child, None) for child in reversed(children))
                continue
            count, aux = level
            children = built[len(built) - count :]
            del built[len(built) - count :]
            built.append(_rebuild(reg, node, aux, children))
    return tree


# A construction `check` makes is no unflatten of JAX's, even when `check` runs
# inside one (a `__post_init__` that checks a subtree).
register_barrier(check.__code__)
