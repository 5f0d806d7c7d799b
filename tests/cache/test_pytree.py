"""The cache of `PyTree[...]` checks: same verdicts, same errors and the same shape
memo as without it, with the leaf-by-leaf check skipped on a hit."""

# A leading space in a one-name shape string (`" n"`) keeps linters from reading it as
# a forward reference (jaxtyping's FAQ); jaxtyping strips it.

import collections
import dataclasses
import enum
import functools
import gc
import warnings
import weakref
from typing import Any, Literal, Union

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Int, PyTree, Shaped, jaxtyped
from jaxtyping._storage import get_shape_memo, pop_shape_memo, push_shape_memo

import typecheck_guard
from helpers import requires
from typecheck_guard._cache import _pytree as _pytree_cache
from typecheck_guard._compat import _jaxtyping as _jaxtypingcompat

_MetaPyTree = type(PyTree)


@pytest.fixture
def cached():
    """The cache on and empty for one test."""
    typecheck_guard.clear_pytree_cache()
    with typecheck_guard.cache_pytree_checks(True):
        yield
    typecheck_guard.clear_pytree_cache()


class _Count:
    n = 0


@pytest.fixture
def leaf_checks(monkeypatch):
    """Counts jaxtyping's leaf-by-leaf PyTree checks (`_MetaPyTree._check`)."""
    original = _MetaPyTree.__dict__["_check"]
    count = _Count()

    def _check(cls, obj, pytree_memo):
        count.n += 1
        return original(cls, obj, pytree_memo)

    monkeypatch.setattr(_MetaPyTree, "_check", _check)
    return count


def _install(**kwargs):
    with warnings.catch_warnings():
        # Classes left in JAX's registry by earlier tests are reported on install().
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install(**kwargs)


def _arr(*shape: int, dtype: Any = np.float32) -> Any:
    # `device_put` of a NumPy array compiles nothing, whatever the shape.
    return jnp.asarray(np.zeros(shape, dtype))


def _params(n=3, leaves=4):
    return {f"w{i}": _arr(n) for i in range(leaves)}


# --- the switch, install and uninstall -------------------------------------------------


def test_install_patches_and_uninstall_restores():
    original = _MetaPyTree.__dict__["__instancecheck__"]
    _install()
    assert _MetaPyTree.__dict__["__instancecheck__"] is not original
    assert isinstance(_params(), PyTree[Float[Array, "n"]])
    assert typecheck_guard.pytree_cache_info().currsize == 1
    typecheck_guard.uninstall()
    assert _MetaPyTree.__dict__["__instancecheck__"] is original
    assert typecheck_guard.pytree_cache_info().currsize == 0


def test_install_without_pytree_cache():
    original = _MetaPyTree.__dict__["__instancecheck__"]
    _install(pytree_cache=False)
    assert typecheck_guard.installed()
    assert _MetaPyTree.__dict__["__instancecheck__"] is original


def test_switch_is_a_context_manager_and_restores(leaf_checks):
    original = _MetaPyTree.__dict__["__instancecheck__"]
    typecheck_guard.clear_pytree_cache()
    ann = PyTree[Float[Array, "n"]]
    _install()
    isinstance(_params(), ann)
    with typecheck_guard.cache_pytree_checks(False):
        isinstance(_params(), ann)
        with typecheck_guard.cache_pytree_checks(True):
            assert isinstance(_params(), ann)
        isinstance(_params(), ann)
    assert isinstance(_params(), ann)
    # One miss, then a hit each time the cache is on; the check ran while it was off.
    assert typecheck_guard.pytree_cache_info()[:2] == (2, 1)
    assert leaf_checks.n == 3
    typecheck_guard.uninstall()
    assert _MetaPyTree.__dict__["__instancecheck__"] is original

    # Without install(): on inside the block only.
    with typecheck_guard.cache_pytree_checks():
        assert _MetaPyTree.__dict__["__instancecheck__"] is not original
    assert _MetaPyTree.__dict__["__instancecheck__"] is original
    with pytest.raises(TypeError, match="cache_pytree_checks\\(False\\)"):
        typecheck_guard.cache_pytree_checks("off")  # pyright: ignore[reportArgumentType]


def test_cache_info_and_clear(cached):
    ann = PyTree[Float[Array, "n"]]
    info = typecheck_guard.pytree_cache_info()
    assert info == (0, 0, _pytree_cache.MAXSIZE, 0)
    assert (info.hits, info.misses, info.currsize) == (0, 0, 0)
    for _ in range(3):
        isinstance(_params(), ann)
    assert typecheck_guard.pytree_cache_info() == (2, 1, _pytree_cache.MAXSIZE, 1)
    typecheck_guard.clear_pytree_cache()
    assert typecheck_guard.pytree_cache_info() == (0, 0, _pytree_cache.MAXSIZE, 0)


# --- what a hit skips, with each checker ---------------------------------------------


def test_hit_skips_the_leaf_checks(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, "..."]]):
        return p

    f(_params(leaves=50))
    first = leaf_checks.n
    assert first >= 1
    for _ in range(5):
        f(_params(leaves=50))  # new arrays, same tree signature
    assert leaf_checks.n == first
    assert typecheck.calls == 6
    assert typecheck_guard.pytree_cache_info().hits >= 5


def test_plain_isinstance_outside_jaxtyped(cached, leaf_checks):
    ann = PyTree[Float[Array, "n"]]
    # Outside @jaxtyped, jaxtyping checks every leaf against fresh dims: this passes.
    ragged = [_arr(2), _arr(3)]
    assert isinstance(ragged, ann)
    assert isinstance(ragged, ann)
    assert leaf_checks.n == 1
    # Inside, `n` is one size for all leaves: the cache must not answer from above.
    with jaxtyped("context"):
        assert not isinstance(ragged, ann)
        assert not isinstance(ragged, ann)
    assert leaf_checks.n == 3


def test_failure_is_never_cached_and_keeps_its_message(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, " n"]]):
        return p

    f(_params())
    bad = _params()
    bad["w1"] = _arr(3, dtype=np.int32)
    messages = []
    for enabled in (True, True, False):
        with typecheck_guard.cache_pytree_checks(enabled):
            with pytest.raises(typecheck.errors) as e:
                f(bad)
        messages.append(str(e.value))
    assert messages[0] == messages[1] == messages[2]
    assert typecheck_guard.pytree_cache_info().currsize == 1


def test_tracers_are_checked_uncached(cached, typecheck, leaf_checks):
    @jax.jit
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, " n"]]):
        return jax.tree.map(lambda x: x + 1, p)

    f(_params())
    f(_params())  # a cache hit of jit: the function body does not run
    assert leaf_checks.n == 1
    assert typecheck_guard.pytree_cache_info()[:2] == (0, 0)
    with pytest.raises(typecheck.errors):
        f({"a": _arr(2), "b": _arr(3)})


# --- each annotation form ------------------------------------------------------------


def _same_failure(f, *args, errors):
    """`f(*args)` fails with the cache, again, and without it, with one message."""
    messages = []
    for enabled in (True, True, False):
        with typecheck_guard.cache_pytree_checks(enabled):
            with pytest.raises(errors) as e:
                f(*args)
        messages.append(str(e.value))
    assert messages[0] == messages[1] == messages[2], messages


def test_named_dim_across_two_arguments(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, " n"]], q: PyTree[Float[Array, " n"]]):
        return p

    three, four = _params(3), _params(4)
    f(three, three)
    f(three, three)
    f(four, four)
    checks = leaf_checks.n
    f(three, three)
    f(four, four)
    assert leaf_checks.n == checks  # every one of these checks was a hit
    # `p` is a hit, and its replayed binding n=3 makes `q` fail.
    _same_failure(f, three, four, errors=typecheck.errors)
    _same_failure(f, four, three, errors=typecheck.errors)


def test_dim_bound_in_pytree_read_by_array(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, " n"]], x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    f(_params(3), _arr(3))
    checks = leaf_checks.n
    f(_params(3), _arr(3))
    assert leaf_checks.n == checks
    _same_failure(f, _params(3), _arr(4), errors=typecheck.errors)


def test_dim_bound_by_array_read_by_pytree(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(x: Float[Array, " n"], p: PyTree[Float[Array, " n"]]):
        return x

    f(_arr(3), _params(3))
    f(_arr(4), _params(4))
    checks = leaf_checks.n
    f(_arr(3), _params(3))
    f(_arr(4), _params(4))
    assert leaf_checks.n == checks
    _same_failure(f, _arr(4), _params(3), errors=typecheck.errors)


def test_variadic_dims(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, "*batch n"]], x: Float[Array, "*batch"]):
        return x

    tree = {"a": _arr(2, 5, 3), "b": _arr(2, 5, 3)}
    f(tree, _arr(2, 5))
    checks = leaf_checks.n
    f(tree, _arr(2, 5))
    assert leaf_checks.n == checks
    _same_failure(f, tree, _arr(5, 2), errors=typecheck.errors)
    _same_failure(
        f, {"a": _arr(2, 5, 3), "b": _arr(5, 3)}, _arr(2, 5), errors=typecheck.errors
    )


def test_broadcast_variadic_dims(cached, typecheck):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, "*#batch"]], x: Float[Array, "*batch"]):
        return x

    tree = {"a": _arr(1, 3), "b": _arr(2, 1)}
    f(tree, _arr(2, 3))
    f(tree, _arr(2, 3))  # the replayed binding is the broadcast shape (2, 3)
    assert typecheck_guard.pytree_cache_info().hits >= 1
    _same_failure(f, tree, _arr(2, 4), errors=typecheck.errors)


def test_structure_name(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, "..."], " T"], q: PyTree[Float[Array, "..."], " T"]):  # pyright: ignore[reportUndefinedVariable]
        return p

    f(_params(leaves=3), _params(leaves=3))
    checks = leaf_checks.n
    f(_params(leaves=3), _params(leaves=3))
    assert leaf_checks.n == checks
    _same_failure(f, _params(leaves=3), _params(leaves=2), errors=typecheck.errors)
    _same_failure(
        f, _params(leaves=3), list(_params(leaves=3).values()), errors=typecheck.errors
    )


@pytest.mark.parametrize(
    "composite, z, bad_z",
    [
        # The structure of y, each of whose leaves has the structure of x.
        ("S T", {"key": (4, 5)}, {"key": (4, 5, 6)}),
        # Lower levels are x's structure, upper levels anything.
        ("... T", [(1, 2), [(3, 4)]], [(1, 2), (3,)]),
        # A prefix of the structure of y.
        ("S ...", {"key": [1, (2, 3)]}, [1]),
    ],
)
def test_composite_structures(cached, typecheck, leaf_checks, composite, z, bad_z):
    def f(x, y, w):
        return x

    # Set before decorating: a string annotation could not name `composite`.
    f.__annotations__ = {
        "x": PyTree[int, "T"],
        "y": PyTree[int, "S"],
        "w": PyTree[int, composite],
    }
    f = jaxtyped(typechecker=typecheck)(f)
    x, y = (1, 2), {"key": 3}
    f(x, y, z)
    checks = leaf_checks.n
    f(x, y, z)
    assert leaf_checks.n == checks
    _same_failure(f, x, y, bad_z, errors=typecheck.errors)


def test_composite_structure_needs_its_names(cached):
    ann = PyTree[int, "S T"]
    for _ in range(2):
        with jaxtyped("context"), pytest.raises(Exception, match="has not been seen"):
            isinstance([1], ann)
    assert typecheck_guard.pytree_cache_info().currsize == 0


def test_treepath_dims(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, "?n"], " T"], q: PyTree[Float[Array, "?n 2"], " T"]):  # pyright: ignore[reportUndefinedVariable]
        return p

    p = {"a": _arr(3), "b": _arr(4)}
    q = {"a": _arr(3, 2), "b": _arr(4, 2)}
    f(p, q)
    checks = leaf_checks.n
    f(p, q)
    assert leaf_checks.n == checks
    _same_failure(f, p, {"a": _arr(3, 2), "b": _arr(3, 2)}, errors=typecheck.errors)


def test_literal_leaves_are_keyed_by_value(cached, typecheck, leaf_checks):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Literal["relu", "gelu"]]):
        return p

    f({"a": "relu", "b": "gelu"})
    f({"a": "relu", "b": "gelu"})
    assert leaf_checks.n == 1
    _same_failure(f, {"a": "relu", "b": "tanh"}, errors=typecheck.errors)

    # An array is compared by value too, so it is never keyed.
    ann = PyTree[Literal[1] | Float[Array, ""]]
    assert isinstance([jnp.array(1)], ann)
    assert isinstance([jnp.array(1)], ann)
    assert typecheck_guard.pytree_cache_info().currsize == 1


def test_plain_class_leaves_are_keyed_by_type(cached, leaf_checks):
    # `typing.Union`: jaxtyping before 0.3 does not check the leaves of `float | int`.
    ann = PyTree[Union[float, int]]  # noqa: UP007
    assert isinstance({"lr": 0.1, "step": 3}, ann)
    assert isinstance({"lr": 0.2, "step": 4}, ann)  # new values, same types: a hit
    assert leaf_checks.n == 1
    assert not isinstance({"lr": "0.1", "step": 3}, ann)


def test_union_with_failing_alternative_replays_the_memo_swap(cached):
    # `Float[Array, "n m"]` fails on a 1-d leaf after jaxtyping copied the memo, so
    # jaxtyping swaps in the copies: the memo `jaxtyped` pushed stops being current.
    ann = PyTree[Union[Float[Array, "n m"], Float[Array, " n"]]]  # noqa: UP007
    results = []
    for enabled in (False, True, True):
        with typecheck_guard.cache_pytree_checks(enabled):
            pushed = push_shape_memo({})
            try:
                assert isinstance([_arr(3), _arr(3, 2)], ann)
                current = get_shape_memo()
                results.append(
                    (
                        [dict(d) for d in pushed[:3]],
                        [dict(d) for d in current[:3]],
                        [c is p for c, p in zip(current, pushed, strict=True)],
                    )
                )
            finally:
                pop_shape_memo()
    assert results[0] == results[1] == results[2]
    assert results[0][2] == [False] * 4
    assert typecheck_guard.pytree_cache_info().hits == 1


def test_uncacheable_annotations_run_every_time(cached, leaf_checks):
    cases = [(PyTree[list[int]], [[1, 2]]), (PyTree[Float[Array, "n+1"]], [_arr(3)])]
    for ann, tree in cases:
        with jaxtyped("context"):
            assert isinstance(_arr(2), Float[Array, "n"])  # pyright: ignore[reportArgumentType]
            assert isinstance(tree, ann)
            assert isinstance(tree, ann)
    assert leaf_checks.n == 4
    assert typecheck_guard.pytree_cache_info()[:2] == (0, 0)


class _Box:
    # A pytree node whose aux data is whatever it is given.
    def __init__(self, x, meta):
        self.x, self.meta = x, meta


jax.tree_util.register_pytree_node(
    _Box, lambda b: ((b.x,), b.meta), lambda meta, children: _Box(children[0], meta)
)


def test_uncomparable_aux_data_runs_the_check(cached, leaf_checks):
    # JAX refuses to compare treedefs whose aux data is an array: such trees are
    # checked every time, and leave at most one entry behind.
    ann = PyTree[Float[Array, "n"]]
    for _ in range(4):
        assert isinstance(_Box(_arr(2), np.arange(3)), ann)
    assert leaf_checks.n == 4
    assert typecheck_guard.pytree_cache_info().currsize <= 1
    # Aux data compared by value: a hit.
    assert isinstance(_Box(_arr(2), ["meta"]), ann)
    assert isinstance(_Box(_arr(2), ["meta"]), ann)
    assert leaf_checks.n == 5


# --- memory --------------------------------------------------------------------------


def test_annotation_is_not_kept_alive(cached):
    # jaxtyping keeps every `PyTree[...]` it builds in an lru_cache; build one past it.
    ann = _MetaPyTree.__getitem__.__wrapped__(PyTree, Float[Array, "n"])
    isinstance(_params(), ann)
    isinstance(_params(), ann)
    assert typecheck_guard.pytree_cache_info().currsize == 1
    ref = weakref.ref(ann)
    del ann
    gc.collect()
    assert ref() is None
    assert typecheck_guard.pytree_cache_info().currsize == 0


def test_shape_churn_stays_bounded(cached, monkeypatch):
    # 100,000 distinct leaf shapes, each a new key. The bound is the cache's own
    # bookkeeping, so jaxtyping's leaf check (tens of µs, and not what is tested here)
    # is replaced by an always-passing one to keep this test fast.
    monkeypatch.setattr(_MetaPyTree, "_check", lambda cls, obj, pytree_memo: True)
    ann = PyTree[Shaped[np.ndarray, "..."]]
    zero = np.float32(0)
    maxsize = typecheck_guard.pytree_cache_info().maxsize
    for i in range(100_000):
        leaf = np.broadcast_to(zero, (i % 1000 + 1, i // 1000 + 1))  # no memory
        assert isinstance([leaf], ann)
    info = typecheck_guard.pytree_cache_info()
    assert info.misses == 100_000
    assert info.currsize == maxsize


def test_lru_keeps_the_recently_used(cached, leaf_checks):
    ann = PyTree[Shaped[np.ndarray, "..."]]
    maxsize = typecheck_guard.pytree_cache_info().maxsize
    hot = [np.zeros((0, 1))]
    for i in range(2 * maxsize):
        isinstance(hot, ann)
        isinstance([np.zeros((i + 1,))], ann)
    checks = leaf_checks.n
    isinstance(hot, ann)
    assert leaf_checks.n == checks
    isinstance([np.zeros((1,))], ann)  # long evicted
    assert leaf_checks.n == checks + 1


# --- the user's objects: never called, never kept -----------------------------------
#
# Plain jaxtyping runs none of the user's `__eq__`, `__hash__` or properties to check
# `PyTree[Float[Array, ...]]` (its flatten aside), and holds nothing of the value once
# the check returns. Each test runs the same checks without and with the cache and
# compares what they returned and what they called.

_calls: collections.Counter[str] = collections.Counter()


class _Meta:
    """Aux data or a dict key with comparisons of its own, counted."""

    def __init__(self, v: Any):
        self.v = v

    def __eq__(self, other: object) -> bool:
        _calls["eq"] += 1
        return isinstance(other, _Meta) and other.v == self.v

    def __hash__(self) -> int:
        return hash(self.v)

    def __lt__(self, other: "_Meta") -> bool:
        return self.v < other.v


class _Plain:
    """Aux data compared by identity, as Equinox's `MISSING` is."""


def _both(run: Any) -> list[Any]:
    """`run()` without the cache, then with it (empty): what it returned, and the
    calls counted in `_calls`."""
    out = []
    for enabled in (False, True):
        typecheck_guard.clear_pytree_cache()
        _calls.clear()
        with typecheck_guard.cache_pytree_checks(enabled):
            result = run()
        out.append((result, dict(_calls)))
    return out


def test_lookups_call_no_eq_of_aux_data_or_dict_keys(cached):
    # JAX compares aux data and dict keys with `==` when it compares treedefs, and
    # asks the other side when one side can't decide: a lookup used to call the
    # user's `__eq__` (jaxtyping never does here), and one that raised made it raise.
    ann = PyTree[Float[Array, " n"]]

    def run():
        verdicts = []
        for v in (1, 1, 2, 1):
            verdicts.append(isinstance([_Box(_arr(2), _Meta(v))], ann))
            verdicts.append(isinstance({_Meta(v): _arr(2)}, ann))
            # The same structures with builtin aux data and keys: stored entries
            # that the user's objects above would be compared with.
            verdicts.append(isinstance([_Box(_arr(2), v)], ann))
            verdicts.append(isinstance({v: _arr(2)}, ann))
        return verdicts

    (plain, plain_calls), (with_cache, cache_calls) = _both(run)
    assert with_cache == plain
    assert plain_calls.get("eq", 0) == cache_calls.get("eq", 0) == 0


def test_aux_data_and_dict_keys_are_not_kept_alive(cached, leaf_checks):
    ann = PyTree[Float[Array, " n"]]
    key, aux, by_identity = _Meta(7), _Meta(8), _Plain()
    refs = [weakref.ref(o) for o in (key, aux, by_identity)]
    for _ in range(2):
        assert isinstance({key: _arr(2)}, ann)
        assert isinstance([_Box(_arr(2), aux)], ann)
        assert isinstance([_Box(_arr(2), by_identity)], ann)
    hits, checks = typecheck_guard.pytree_cache_info().hits, leaf_checks.n
    del key, aux, by_identity
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    # Aux data compared by identity is stored (weakly): a hit. Aux data and keys
    # with an `__eq__` of their own can't be compared without calling it: checked.
    assert (hits, checks) == (1, 5)
    # What referred to `by_identity` equals no other object.
    assert isinstance([_Box(_arr(2), _Plain())], ann)
    assert typecheck_guard.pytree_cache_info().hits == 1


def test_classes_in_the_tree_are_not_kept_alive(cached, leaf_checks):
    def make() -> tuple[type, type]:
        class Count(int):
            pass

        return Count, collections.namedtuple("Pair", "a b")

    Count, Pair = make()
    refs = [weakref.ref(Count), weakref.ref(Pair)]
    ann = PyTree[int]
    for _ in range(2):
        assert isinstance([Count(1), 2], ann)
        assert isinstance(Pair(1, 2), ann)
    checks = leaf_checks.n
    del Count, Pair
    gc.collect()
    assert [r() for r in refs] == [None, None]
    # A leaf's class is held weakly (the second `Count` tree was a hit); a stored
    # treedef would hold a namedtuple's class, so its trees are checked every time.
    assert checks == 3


class _Tol:
    """Aux data equal within a tolerance: an `==` that is not transitive."""

    def __init__(self, v: float):
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tol) and abs(other.v - self.v) < 1.0

    def __hash__(self) -> int:
        return 0


def test_structure_name_compares_the_arguments_own_treedefs(cached, typecheck):
    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, " n"], " T"], q: PyTree[Float[Array, " n"], " T"]):  # pyright: ignore[reportUndefinedVariable]
        return "ok"

    x = _arr(3)
    for enabled in (False, True, True):
        with typecheck_guard.cache_pytree_checks(enabled):
            assert f(_Box(x, _Tol(0.0)), _Box(x, _Tol(0.0))) == "ok"
            # 0.8 == 1.6, though 0.0 != 1.6: binding T to the first call's treedef
            # failed a call that passes.
            assert f(_Box(x, _Tol(0.8)), _Box(x, _Tol(1.6))) == "ok"


def test_hit_binds_the_structure_of_the_value_checked(cached, typecheck):
    # -0.0 == 0.0, so the two trees share a key; the memo (and the error message that
    # prints it) holds the treedef of the argument checked now, as without the cache.
    ann = PyTree[Float[Array, " n"], " T"]  # pyright: ignore[reportUndefinedVariable]
    x = _arr(3)

    def bound(tree: Any) -> str:
        with jaxtyped("context"):
            assert isinstance(tree, ann)
            return repr(get_shape_memo()[2]["T"])

    assert bound(_Box(x, -0.0)) == repr(jax.tree.structure(_Box(x, -0.0)))
    assert bound(_Box(x, 0.0)) == repr(jax.tree.structure(_Box(x, 0.0)))
    assert typecheck_guard.pytree_cache_info().hits == 1

    @jaxtyped(typechecker=typecheck)
    def f(p: PyTree[Float[Array, " n"], " T"], q: PyTree[Float[Array, " n"], " T"]):  # pyright: ignore[reportUndefinedVariable]
        return p

    f(_Box(x, -0.0), _Box(x, -0.0))
    _same_failure(f, _Box(x, 0.0), [x], errors=typecheck.errors)


def test_memo_after_calls_with_different_shapes(cached):
    ann = PyTree[Float[Array, "*b n"], " T"]  # pyright: ignore[reportUndefinedVariable]
    trees = [{"a": _arr(2, 3)}, {"a": _arr(4, 3)}, {"a": _arr(2, 3)}, [_arr(2, 5)]]

    def run():
        seen = []
        for tree in trees + trees:
            with jaxtyped("context"):
                verdict = isinstance(tree, ann)
                single, variadic, structures, _ = get_shape_memo()
                seen.append(
                    (verdict, dict(single), dict(variadic), repr(structures.get("T")))
                )
        return seen

    (plain, _), (with_cache, _) = _both(run)
    assert with_cache == plain
    assert typecheck_guard.pytree_cache_info()[:2] == (5, 3)  # three trees


class _Color(enum.Enum):
    RED = 1
    GREEN = 2

    def __eq__(self, other: object) -> bool:
        _calls["eq"] += 1
        return self is other

    def __hash__(self) -> int:
        _calls["hash"] += 1
        return hash(self.name)


def test_literal_values_with_their_own_eq_and_hash(cached):
    # typeguard compares the value with each literal (`GREEN == RED` here); the key
    # used to hash it, and a hit skipped the comparison.
    ann = PyTree[Literal[_Color.GREEN, _Color.RED]]

    def run():
        return [isinstance({"a": _Color.RED}, ann) for _ in range(3)]

    plain, with_cache = _both(run)
    assert with_cache == plain
    assert plain[1]["eq"] >= 3 and "hash" not in plain[1]

    # Builtin leaves, but a literal with an `__eq__` of its own: jaxtyping compares
    # every node with it.
    ann = PyTree[Literal["a", _Color.RED]]

    def run_str():
        return [isinstance({"k": "a"}, ann) for _ in range(3)]

    plain, with_cache = _both(run_str)
    assert with_cache == plain
    assert plain[1]["eq"] >= 3


class _ShapedInt(int):
    """An `int` leaf with `shape` and `dtype` properties, counted."""

    @property
    def shape(self) -> tuple[int, ...]:
        _calls["shape"] += 1
        return ()

    @property
    def dtype(self) -> Any:
        _calls["dtype"] += 1
        return np.dtype("int32")


class _CountedArray(np.ndarray):
    """An array whose `shape` is a property of its own, counted."""

    @property
    def shape(self) -> tuple[int, ...]:  # pyright: ignore[reportIncompatibleVariableOverride]
        _calls["shape"] += 1
        return super().shape


def test_leaf_attributes_are_read_only_as_jaxtyping_reads_them(cached):
    # An `int` leaf: jaxtyping never reads its `shape` or `dtype`; nor may the key.
    ann = PyTree[int]

    def run():
        return [isinstance([_ShapedInt(1)], ann) for _ in range(3)]

    plain, with_cache = _both(run)
    assert with_cache == plain == ([True] * 3, {})
    assert typecheck_guard.pytree_cache_info().hits == 2

    # An instance of the annotation's array class whose `shape` runs code: jaxtyping
    # reads it on every check, and so it is checked every time.
    ann = PyTree[Float[np.ndarray, " n"]]
    leaf = np.zeros(3, np.float32).view(_CountedArray)

    def run_array():
        return [isinstance([leaf], ann) for _ in range(3)]

    plain, with_cache = _both(run_array)
    assert with_cache == plain
    assert plain[1]["shape"] >= 3


class _Node:
    """A node whose flatten is counted."""

    def __init__(self, x: Any):
        self.x = x


def _flatten_node(node: _Node) -> tuple[tuple[Any], None]:
    _calls["flatten"] += 1
    return (node.x,), None


jax.tree_util.register_pytree_node(
    _Node, _flatten_node, lambda _, children: _Node(children[0])
)


def test_leaf_type_that_matches_a_node_is_checked_uncached(cached):
    # jaxtyping's flatten stops at a node its leaf type accepts; the cache's went on,
    # into the node's flatten, on every call.
    ann = PyTree[_Node]

    def run():
        return [isinstance([_Node(_arr(2)), _Node(_arr(3))], ann) for _ in range(3)]

    plain, with_cache = _both(run)
    assert with_cache == plain
    assert plain[1] == {}


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["act"], meta_fields=[]
)
@dataclasses.dataclass(eq=False)
class _Activation:
    act: Any

    def __eq__(self, other: object) -> bool:
        _calls["eq"] += 1
        return NotImplemented

    __hash__ = object.__hash__


def test_literal_over_nodes_with_their_own_eq(cached):
    # jaxtyping asks the leaf type of every node whether it is a leaf: `"relu" ==
    # node` asks the node's `__eq__`, which a hit skipped.
    ann = PyTree[Literal["relu", "gelu"]]

    def run():
        return [isinstance([_Activation("relu"), "gelu"], ann) for _ in range(3)]

    plain, with_cache = _both(run)
    assert with_cache == plain
    assert plain[1]["eq"] >= 3


class _Dim(int):
    """A dimension bound by someone else's array type, compared and hashed counted."""

    def __eq__(self, other: object) -> bool:
        _calls["eq"] += 1
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        _calls["ne"] += 1
        return int(self) != other

    def __hash__(self) -> int:
        _calls["hash"] += 1
        return int.__hash__(self)


def test_memo_entries_with_their_own_eq_are_not_compared(cached):
    ann = PyTree[Float[Array, " n"]]

    def run():
        verdicts = []
        for _ in range(3):
            pushed = push_shape_memo({})
            try:
                pushed[0]["n"] = _Dim(3)
                verdicts.append(isinstance([_arr(3)], ann))
            finally:
                pop_shape_memo()
        return verdicts

    plain, with_cache = _both(run)
    assert with_cache == plain
    assert plain[1] == {"ne": 3}


def test_flax_struct_trees_still_hit(cached, leaf_checks):
    from flax import struct

    @struct.dataclass
    class Layer:
        w: Any
        features: int = struct.field(pytree_node=False, default=2)  # aux data

    ann = PyTree[Float[Array, "..."]]
    for _ in range(3):
        assert isinstance({"a": [Layer(_arr(2)), Layer(_arr(3))]}, ann)
    assert leaf_checks.n == 1
    assert typecheck_guard.pytree_cache_info().hits == 2


@requires(
    "equinox",
    "0.13.3",
    "older Equinox keeps a module's static fields in a dataclass of its own, whose "
    "`__eq__` the cache won't call: its modules are checked every time",
)
def test_equinox_modules_still_hit(cached, leaf_checks):
    # Equinox puts its `MISSING` sentinel, compared by identity, in every module's
    # aux data: held weakly.
    import equinox as eqx

    ann = PyTree[Float[Array, "..."]]
    linear = eqx.nn.Linear(2, 3, key=jax.random.PRNGKey(0))
    for _ in range(3):
        assert isinstance(jax.tree.map(lambda x: x + 1, linear), ann)
    assert leaf_checks.n == 1
    assert typecheck_guard.pytree_cache_info().hits == 2


# --- jaxtyping internals -------------------------------------------------------------


@pytest.fixture
def reload_internals():
    _jaxtypingcompat.load.cache_clear()
    yield
    _jaxtypingcompat.load.cache_clear()


def test_changed_internals_switch_the_cache_off_with_one_warning(
    monkeypatch, reload_internals
):
    import jaxtyping

    original = _MetaPyTree.__dict__["__instancecheck__"]

    def _check(cls, obj):  # a jaxtyping whose PyTree check took other arguments
        return True

    monkeypatch.setattr(_MetaPyTree, "_check", _check)
    with pytest.warns(typecheck_guard.PartsDisabledWarning) as caught:
        _install()
    (warning,) = caught
    message = str(warning.message)
    assert f"jaxtyping {jaxtyping.__version__}" in message
    from typecheck_guard._compat._versions import spec

    assert f"jaxtyping{spec('jaxtyping')}" in message
    assert "PyTree[...] checks are not cached" in message
    # The rest is installed; the cache is not.
    assert typecheck_guard.installed()
    assert _MetaPyTree.__dict__["__instancecheck__"] is original


def test_changed_memo_layout_fails_install_loudly(monkeypatch, reload_internals):
    from jaxtyping import _storage

    def set_treepath_memo(index, structure):
        _storage._treepath_storage.value = f"[{structure}/{index}] "

    monkeypatch.setattr(_storage, "set_treepath_memo", set_treepath_memo)
    with pytest.raises(RuntimeError, match="shape memo that jaxtyping's PyTree check"):
        typecheck_guard.cache_pytree_checks()
    assert not typecheck_guard.installed()


# --- cached and uncached agree, on random trees, annotations and prior bindings -------

_SHAPES = [(), (1,), (2,), (3,), (2, 3), (3, 2), (1, 3), (2, 2, 3)]
_LEAFTYPES: list[Any] = [
    Float[Array, "n"],
    Float[Array, "*batch"],
    Float[Array, "*batch n"],
    Shaped[Array, "n m"],
    Float[Array, "#n"],
    Float[Array, "*#batch"],
    Float[Array, "..."],
    Shaped[Array, "_ n"],
    Float[np.ndarray, "n"],
    Shaped[Array | np.ndarray, "*b n"],
    Float[Array, "2"],
    Float[Array, "n"] | Int[Array, "m"],
    Float[Array, "n m"] | Float[Array, "n"],
    Shaped[Array, "?n"],
    Shaped[Array, "*?b"],
    int,
    int | Float[Array, "n"],
    Float[Array, "n"] | None,  # pyright: ignore[reportOperatorIssue]
    Literal[0, 1],
    Literal[1] | Float[Array, "n"],
    Float[Array, "n+1"],
    list[int],
    # Nested: the outer check is opaque, the inner ones may be cached inside it.
    PyTree[Float[Array, "n"]],
    PyTree[Shaped[Array, "*b"], "S"],
]
_STRUCTURES = [None, None, None, "T", "T", "S", "T S", "... T", "T ...", "... S"]


@functools.cache  # one array per signature: drawing trees then creates none
def _leaf(kind: str, shape: tuple[int, ...], dtype: Any) -> Any:
    if kind == "int":
        return len(shape) % 2
    if kind == "numpy":
        return np.zeros(shape, dtype)
    return _arr(*shape, dtype=dtype)


_leaf_specs = st.tuples(
    st.sampled_from(["jax", "jax", "numpy", "int"]),
    st.sampled_from(_SHAPES),
    st.sampled_from([np.float32, np.float32, np.int32]),
)
_COMMON = "common leaf"  # stands for the leaf most of a tree's leaves share


def _trees(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(leaves, st.none()),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.sampled_from("abc"), children, max_size=3),
            st.tuples(children, children),
        ),
        max_leaves=5,
    )


# Built once: building strategies inside `_cases` would dominate the test's time.
_spec_trees = _trees(st.one_of(st.just(_COMMON), st.just(_COMMON), _leaf_specs))
_structures = _trees(st.just(0))
_priors = st.tuples(
    st.dictionaries(
        st.sampled_from(
            ["n", "m", "(Leaf 0 in structure T) n", "(Leaf 1 in structure T) n"]
        ),
        st.integers(1, 3),
    ),
    st.dictionaries(
        st.sampled_from(["batch", "b", "(Leaf 0 in structure T) b"]),
        st.tuples(st.booleans(), st.sampled_from([(), (1,), (2,), (3, 2), (2, 3)])),
    ),
    st.dictionaries(
        st.sampled_from(["T", "S"]),
        st.one_of(
            st.just("own"),  # the structure of the tree itself
            st.just(jax.tree_util.tree_structure(0)),  # `"... T"`, `"T ..."` then pass
            _structures.map(jax.tree_util.tree_structure),
        ),
    ),
)


@st.composite
def _cases(draw: Any) -> tuple[Any, Any, Any, bool]:
    """An annotation, a tree, prior memo entries, and whether a memo is active.

    Most leaves of a tree share one kind, shape and dtype, and prior structures are
    often that of the tree itself, so that many checks pass (and so get cached)."""
    leaftype = draw(st.sampled_from(_LEAFTYPES))
    structure = draw(st.sampled_from(_STRUCTURES))
    ann = PyTree[leaftype] if structure is None else PyTree[leaftype, structure]
    common = _leaf(*draw(_leaf_specs))
    tree = jax.tree.map(
        lambda spec: common if spec == _COMMON else _leaf(*spec),
        draw(_spec_trees),
        is_leaf=lambda x: (
            isinstance(x, tuple) and len(x) == 3 and isinstance(x[0], str)
        ),
    )
    single, variadic, structures = draw(_priors)
    own = jax.tree_util.tree_structure(tree)
    # (`isinstance` first: on jax 0.6, `PyTreeDef == str` raises TypeError.)
    structures = {
        k: own if isinstance(v, str) and v == "own" else v
        for k, v in structures.items()
    }
    return ann, tree, (single, variadic, structures), draw(st.booleans())


def _observe(ann: Any, tree: Any, prior: Any, with_memo: bool) -> Any:
    def verdict():
        try:
            return ("returned", isinstance(tree, ann))
        except Exception as e:
            return ("raised", type(e), str(e))

    if not with_memo:
        return verdict()
    pushed = push_shape_memo({})
    try:
        for memo, entries in zip(pushed[:3], prior, strict=True):
            memo.update(entries)
        out = verdict()
        current = get_shape_memo()
        return (
            out,
            [dict(d) for d in pushed[:3]],
            [dict(d) for d in current[:3]],
            [c is p for c, p in zip(current, pushed, strict=True)],
        )
    finally:
        pop_shape_memo()


@hypothesis.settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(case=_cases())
def test_cached_and_uncached_agree(case):
    ann, tree, prior, with_memo = case
    with typecheck_guard.cache_pytree_checks(False):
        expected = _observe(ann, tree, prior, with_memo)
    typecheck_guard.clear_pytree_cache()
    with typecheck_guard.cache_pytree_checks(True):
        cold = _observe(ann, tree, prior, with_memo)
        warm = _observe(ann, tree, prior, with_memo)
        hits = typecheck_guard.pytree_cache_info().hits
    hypothesis.event("warm hit" if hits else "warm ran the check")
    assert cold == expected
    assert warm == expected
