"""A check `install()` can't skip says so at the class's first rebuild that runs it:
a decorator that is not a checker, put above a class's checked `__init__` (in the
class body, or on `Cls.__init__` after the class is defined), keeps the check in
place. `UnadaptedClassesWarning` names the decorator's wrapper, where it is defined,
and the fix; once per class and wrapper."""

import functools as ft
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard

# The wrapper's name as its code says it (Python 3.10's code has no qualname).
LOGGED = "log_calls.<locals>.logged" if sys.version_info >= (3, 11) else "logged"


def log_calls(fn):
    @ft.wraps(fn)
    def logged(*args, **kwargs):
        return fn(*args, **kwargs)

    return logged


LOGGED_AT = f"tests/adapt/test_unskippable.py:{log_calls.__code__.co_firstlineno + 1}"


def _custom(typecheck):
    @jax.tree_util.register_pytree_node_class
    class Node:
        @log_calls
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    return Node


def _rebuilt_warnings(node, times=3):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(times):
            node = jax.tree.map(jnp.negative, node)  # the line warned at
    return [w for w in caught if w.category is typecheck_guard.UnadaptedClassesWarning]


@pytest.mark.allow_runtime_typechecks
def test_a_wrapper_above_the_checker_warns_once_at_the_first_rebuild(
    installed, typecheck
):
    Node = _custom(typecheck)
    node = Node(jnp.ones(2))
    typecheck.reset()
    (warning,) = _rebuilt_warnings(node)
    assert typecheck.calls == 3  # the checks ran, as without typecheck_guard
    name = "test_unskippable._custom.<locals>.Node"
    assert str(warning.message) == (
        f"typecheck_guard: JAX is rebuilding {name}, and Node.__init__ runs its "
        "typecheck: a decorator that is not a checker wraps it above its checker "
        f"(jaxtyping): {LOGGED} (defined at "
        f"{LOGGED_AT}). install() leaves the check in place, since skipping it would "
        "skip that decorator too (so would unflatten_safe), and it runs on every "
        "rebuild of a Node: every call of a jitted function that returns one, every "
        "tree operation over one. Apply that decorator below the checker, so that "
        "the checker is the outermost layer of Node.__init__ "
        "(`@jaxtyped(typechecker=...)` above it); or, if the decorator need not run "
        "when JAX rebuilds a Node, build the instance with object.__new__ in "
        "Node.tree_unflatten instead of calling Node(...)."
    )
    # At the program's line that made JAX rebuild it, not inside JAX or us.
    assert warning.filename == __file__
    lines = Path(__file__).read_text().splitlines()
    assert "the line warned at" in lines[warning.lineno - 1]
    # Once: the next rebuilds, and a jitted call's, say nothing more.
    step = jax.jit(lambda n: n)
    assert _rebuilt_warnings(step(node)) == []


def test_a_wrapper_put_on_init_after_the_class_is_defined(installed, typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class State:
        x: Float[Array, " n"]

    state = State(jnp.ones(2))
    assert _rebuilt_warnings(state) == []  # install() skips the check
    State.__init__ = log_calls(State.__init__)  # a counting wrapper, added later
    typecheck.reset()
    (warning,) = _rebuilt_warnings(state)
    assert typecheck.calls > 0
    text = str(warning.message)
    assert "and State.__init__ runs its typecheck" in text
    assert f"{LOGGED} (defined at {LOGGED_AT})" in text
    assert text.endswith("(`@jaxtyped(typechecker=...)` above it).")  # no unflatten


def test_nothing_to_say_without_install_or_without_a_wrapper(typecheck):
    Node = _custom(typecheck)
    assert _rebuilt_warnings(Node(jnp.ones(2))) == []  # not installed: no guard

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Plain:
        x: Float[Array, " n"]

    with pytest.warns(typecheck_guard.UnadaptedClassesWarning):
        typecheck_guard.install()  # (it lists the classes registered before it)
    try:

        @jaxtyped(typechecker=typecheck)
        @struct.dataclass
        class Checked:
            x: Float[Array, " n"]

        assert _rebuilt_warnings(Checked(jnp.ones(2))) == []
    finally:
        typecheck_guard.uninstall()
