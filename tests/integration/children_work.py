"""What every process of `children_program.py` does, parent and children alike, with
the classes they share (importable by name, as pickle and `multiprocessing` need).

`State` is a typechecked `flax.struct` dataclass (a custom node in place of JAX's
dataclass node under `install()` on jax 0.10) holding `Node`, a typechecked custom
node; `Defaults` is a `flax.struct` dataclass whose fields all have defaults (read
as the wrong kind of node, JAX would build `Defaults()`: a wrong value, silently).

`work(...)` receives an instance and treedefs with their leaves, reports what this
process is (installed, and whether at start-up), unflattens what it got, counts the
checks of a jitted step's cache-hit calls and of a bad construction, and sends back
a stepped instance and treedefs of its own. `python -m children_work` does the same
with stdin and stdout (pickled), for `subprocess` children.

Nothing here imports typecheck_guard at module level: a child without it imports
this module too.
"""

import functools as ft
import os
import pickle
import sys

import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, Int, jaxtyped

STEPS = 3  # cache-hit calls counted


class Counter:
    """beartype, counting the checks it runs in this process."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn):
        checked = beartype(fn)

        @ft.wraps(checked)
        def counted(*args, **kwargs):
            self.calls += 1
            return checked(*args, **kwargs)

        return counted


typecheck = Counter()


@jax.tree_util.register_pytree_node_class
class Node:
    @jaxtyped(typechecker=typecheck)
    def __init__(self, x: Float[Array, " n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@jaxtyped(typechecker=typecheck)
@struct.dataclass
class State:
    params: Node
    step: Int[Array, ""]
    tag: str = struct.field(pytree_node=False, default="t")


@struct.dataclass
class Defaults:
    a: int = 1
    b: int = 2


def make(x: float, tag: str) -> State:
    return State(Node(jnp.full(3, x)), jnp.zeros((), jnp.int32), tag)


def describe(state: State) -> dict:
    return {
        "type": f"{type(state).__name__}/{type(state.params).__name__}",
        "x": np.asarray(state.params.x).tolist(),
        "step": int(state.step),
        "tag": state.tag,
    }


def payload(state: State, defaults: Defaults) -> tuple:
    """What a process sends: an instance, and two treedefs with their leaves."""
    leaves, treedef = jax.tree.flatten(state)
    d_leaves, d_treedef = jax.tree.flatten(defaults)
    return state, treedef, leaves, d_treedef, d_leaves


def unpack(state, treedef, leaves, d_treedef, d_leaves) -> dict:
    """What a process makes of a payload: the instance, and each treedef unflattened."""
    defaults = d_treedef.unflatten(d_leaves)
    return {
        "instance": describe(state),
        "rebuilt": describe(treedef.unflatten(leaves)),
        "defaults": [type(defaults).__name__, defaults.a, defaults.b],
    }


def _about_this_process() -> dict:
    try:
        import typecheck_guard
        from typecheck_guard import _startup
    except ImportError:
        return {"importable": False, "installed": False, "started": False}
    return {
        "importable": True,
        "installed": typecheck_guard.installed(),
        "started": _startup.started,
    }


def coverage() -> dict:
    """The checks of a jitted step's cache-hit calls, and of a bad construction."""
    step = jax.jit(lambda s: s.replace(params=Node(s.params.x * 0.5), step=s.step + 1))
    state = make(1.0, "c")
    for _ in range(2):  # the trace, and the first cache hit
        state = step(state)
    per_call = []
    for _ in range(STEPS):
        typecheck.calls = 0
        state = step(state)
        per_call.append(typecheck.calls)
    typecheck.calls = 0
    try:
        Node(jnp.ones((2, 2)))
    except Exception as e:  # the checker's own error
        raised = type(e).__name__
    else:
        raised = None
    return {
        "checks_per_call": per_call,
        "bad_construction": raised,
        "bad_construction_checks": typecheck.calls,
    }


def work(state, treedef, leaves, d_treedef, d_leaves) -> tuple:
    """A child's whole job; returns `(report, *payload)` for its parent."""
    report = {"pid": os.getpid(), **_about_this_process()}
    report["received"] = unpack(state, treedef, leaves, d_treedef, d_leaves)
    report.update(coverage())
    back = state.replace(params=Node(state.params.x + 1), step=state.step + 10)
    return (report, *payload(back, Defaults(30, 40)))


def main() -> None:
    args = pickle.loads(sys.stdin.buffer.read())
    out = pickle.dumps(work(*args))
    sys.stdout.buffer.write(out)
    sys.stdout.flush()


if __name__ == "__main__":
    # As itself, not as `__main__`: what the parent pickled names
    # `children_work.State`, and its checks are counted there.
    import children_work

    children_work.main()
