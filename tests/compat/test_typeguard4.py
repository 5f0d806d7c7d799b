"""typeguard 4.x: it instruments the function in place instead of wrapping it, and its
only off-switch, `typeguard.suppress_type_checks`, is process-wide: switched on for an
unflatten, it would also switch off the checks the constructor's body makes (a
construction nested in it, a helper it calls) and other threads' checks. So
`install()` and `unflatten_safe` leave such a check on, as without us, and say why
(`_checkers.py`). Runs only in the typeguard 4 environment (`nox -s typeguard4`);
typeguard 4 skips jaxtyping's generated code, so these classes have a handwritten
`@typechecked` `__init__`."""

# pyright: reportArgumentType=false, reportAttributeAccessIssue=false
# (Bad arguments on purpose, and typeguard 4's private modules.)

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import typecheck_guard
from helpers import run_cached

typeguard = pytest.importorskip("typeguard")
pytestmark = [
    pytest.mark.typeguard4,
    pytest.mark.skipif(
        not hasattr(typeguard, "suppress_type_checks"), reason="needs typeguard 4.x"
    ),
]


def count_checks(fn: Callable[..., Any], *args: Any) -> tuple[int, Any]:
    """How many times typeguard's instrumented code checked its arguments during
    `fn(*args)` (we can't wrap a checker that rewrites the function itself)."""
    from typeguard import _functions, _suppression

    target = _functions.check_argument_types_internal.__code__
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        # The instrumented code always calls in; a suppressed call returns at once.
        if (
            event == "call"
            and frame.f_code is target
            and not _suppression.type_checks_suppressed
        ):
            calls += 1

    sys.setprofile(profile)
    try:
        out = fn(*args)
    finally:
        sys.setprofile(None)
    return calls, out


def _classes():
    import typeguard4_classes

    return typeguard4_classes


@pytest.mark.allow_runtime_typechecks  # unguarded calls check on purpose
def test_typeguard4_checks_every_unflatten_without_us():
    Custom = _classes().make_custom()
    step = jax.jit(lambda c: type(c)(c.x * c.scale, c.scale))
    state = step(Custom(jnp.ones(3), 0.5))
    checks, _ = count_checks(run_cached, step, state, 10)
    assert checks >= 11
    from typecheck_guard._compat._checkers import peel

    assert peel(Custom.__init__).checkers == ("typeguard",)


@pytest.mark.allow_runtime_typechecks  # its unflattens check, as without us
def test_install_leaves_a_typeguard4_check_on_and_says_why(installed):
    Node = _classes().make_struct()
    step = jax.jit(lambda n: n.replace(x=n.x * n.scale))
    state = step(Node(jnp.ones(3), 0.5))
    checks, state = count_checks(run_cached, step, state, 20)
    assert checks >= 20
    assert float(state.x[0]) == 0.5**22
    (record,) = [r for r in typecheck_guard.unadapted() if r.cls is Node]
    assert "typeguard 4 checks inside the function itself" in record.reason
    assert "beartype or typeguard 2.13.3" in record.fix
    with pytest.raises(typeguard.TypeCheckError):
        Node([1.0, 2.0], 0.5)


@pytest.mark.allow_runtime_typechecks  # its unflattens check, as without us
@pytest.mark.parametrize("form", ["call", "with"])
def test_unflatten_safe_leaves_a_typeguard4_check_on(form):
    Custom = _classes().make_custom()
    step = jax.jit(lambda c: type(c)(c.x * c.scale, c.scale))
    state = step(Custom(jnp.ones(3), 0.5))
    if form == "call":
        guarded = typecheck_guard.unflatten_safe(step)
        checks, state = count_checks(run_cached, guarded, state, 20)
    else:
        with typecheck_guard.unflatten_safe():
            checks, state = count_checks(run_cached, step, state, 20)
    assert checks >= 20
    with pytest.raises(typeguard.TypeCheckError):
        Custom(jnp.ones(3), "not a float")


@pytest.mark.allow_runtime_typechecks  # its unflattens check, as without us
def test_we_never_switch_typeguard4_off():
    # `suppress_type_checks` is process-wide in typeguard 4: we never turn it on.
    Custom = _classes().make_custom()
    step = typecheck_guard.unflatten_safe(jax.jit(lambda c: c))
    step(step(Custom(jnp.ones(2), 1.0)))
    from typeguard import _suppression

    assert _suppression.type_checks_suppressed == 0
    with pytest.raises(typeguard.TypeCheckError):
        Custom("x", 1.0)
