"""Checkpoints and serialization don't depend on the plugin: flax msgpack bytes are
identical with and without it, an orbax checkpoint written with it restores without
it and vice versa, and pickle / copy round trips give back equal objects."""

import copy
import dataclasses
import json
import pathlib
import pickle
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from checkpoint_step import define  # the classes the checkpoint subprocesses use
from flax import serialization, struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from helpers import run_cached

# --- flax.serialization ------------------------------------------------------------


def _trained(Params, State):
    params = Params(jnp.arange(6.0).reshape(2, 3), jnp.ones(3))
    state = State(
        params, {"m": jnp.zeros(3), "v": (jnp.ones(2),)}, jnp.zeros((), jnp.int32)
    )

    @jax.jit
    def step(s):
        p = s.params.replace(w=s.params.w * 0.9, b=s.params.b + 0.5)
        momentum = jax.tree.map(lambda x: x + 1, s.momentum)
        return s.replace(params=p, momentum=momentum, step=s.step + 1)

    return run_cached(step, state, 5)


@pytest.mark.allow_runtime_typechecks  # the run without the plugin checks on purpose
def test_msgpack_bytes_identical_with_and_without_plugin(typecheck, request):
    Plain = define(typecheck)
    request.getfixturevalue("installed")
    Adapted = define(typecheck)
    assert (
        typecheck_guard._adapt._register.adapted_how(Adapted[1])
        == "flax.struct.dataclass"
    )
    assert typecheck_guard._adapt._register.adapted_how(Plain[1]) is None
    plain, adapted = _trained(*Plain), _trained(*Adapted)
    typecheck.reset()
    data = serialization.to_bytes(adapted)
    assert data == serialization.to_bytes(plain)
    assert serialization.to_state_dict(adapted).keys() == {"params", "momentum", "step"}
    assert typecheck.calls == 0  # serialising constructs nothing
    # Each restores from the other's bytes (restoring is a construction: checked).
    raw = jax.tree.map(jnp.asarray, serialization.msgpack_restore(data))
    for target in (plain, adapted):
        back = serialization.from_state_dict(target, raw)
        assert type(back) is type(target)
        assert serialization.to_bytes(back) == data
    assert typecheck.calls > 0


# --- orbax-checkpoint, each side in its own interpreter --------------------------

SCRIPT = pathlib.Path(__file__).with_name("checkpoint_step.py")


def _run(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-5000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict:
    pytest.importorskip("orbax.checkpoint")
    root = tmp_path_factory.mktemp("checkpoints")
    on, off = root / "on", root / "off"
    on.mkdir()
    off.mkdir()
    return {
        "saved_off": _run("save", "off", str(off)),
        "saved_on": _run("save", "on", str(on)),
        # With the plugin, from a checkpoint written without it ...
        "on_from_off": _run("restore", "on", str(on), str(off)),
        # ... and without it, from one written with it.
        "off_from_on": _run("restore", "off", str(off), str(on)),
        "msgpack_on": (on / "state.msgpack").read_bytes(),
        "msgpack_off": (off / "state.msgpack").read_bytes(),
    }


def test_orbax_saves_the_same_state(checkpoints):
    on, off = checkpoints["saved_on"], checkpoints["saved_off"]
    assert on["digest"] == off["digest"]
    assert on["step"] == off["step"] == 3
    assert on["checks"] == 0  # saving constructs nothing we check


@pytest.mark.parametrize("direction", ["on_from_off", "off_from_on"])
def test_orbax_restores_across_the_plugin(checkpoints, direction):
    restored = checkpoints[direction]
    saved = checkpoints["saved_off" if direction == "on_from_off" else "saved_on"]
    assert restored["digest"] == saved["digest"]
    assert (restored["type"], restored["params_type"]) == ("State", "Params")
    assert restored["name"] == "run"
    assert restored["stepped"] == 4
    # orbax's restore only unflattens: with the plugin, it runs no check.
    assert restored["checks"] == 0
    # The msgpack written by the other side restores to the same state too.
    assert restored["msgpack"] == saved["digest"]


def test_orbax_from_state_dict_is_still_checked(checkpoints):
    # `from_state_dict` goes through `.replace`: a construction, checked as usual.
    assert checkpoints["on_from_off"]["from_state_dict_checks"] > 0


def test_msgpack_files_identical_across_interpreters(checkpoints):
    assert checkpoints["msgpack_on"] == checkpoints["msgpack_off"]


# --- pickle and copy ---------------------------------------------------------------


def _publish(cls, name):
    # pickle finds a class by module and qualified name.
    cls.__qualname__ = cls.__name__ = name
    cls.__module__ = __name__
    globals()[name] = cls
    return cls


def _equal(a, b):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        type(x) is type(y) and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(la, lb, strict=True)
    )


def _round_trips(obj):
    yield "copy", copy.copy(obj)
    yield "deepcopy", copy.deepcopy(obj)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        yield f"pickle{protocol}", pickle.loads(pickle.dumps(obj, protocol))


def _make(kind, typecheck):
    if kind == "struct":

        @jaxtyped(typechecker=typecheck)
        @struct.dataclass
        class PStruct:
            x: Float[Array, " n"]
            tag: str = struct.field(pytree_node=False, default="t")

        return _publish(PStruct, "PStruct"), lambda c: c(jnp.arange(3.0))
    if kind == "register_dataclass":

        @typecheck_guard.register_dataclass(data_fields=["x"], meta_fields=["tag"])
        @jaxtyped(typechecker=typecheck)
        @dataclasses.dataclass(frozen=True)
        class PData:
            x: Float[Array, " n"]
            tag: str = dataclasses.field(default="t", metadata=dict(static=True))
            cache: tuple = dataclasses.field(init=False, default=())

        return _publish(PData, "PData"), lambda c: c(jnp.arange(3.0))

    # chex flattens every field (no metadata fields): no `tag` here.
    @chex.dataclass
    class PChex:
        x: jax.Array

        @jaxtyped(typechecker=typecheck)
        def __post_init__(self) -> None:
            pass

    return _publish(PChex, "PChex"), lambda c: c(x=jnp.arange(3.0))


@pytest.mark.parametrize("kind", ["struct", "register_dataclass", "chex"])
@pytest.mark.parametrize("mode", ["install", "unflatten_safe"])
def test_pickle_and_copy_round_trips(kind, mode, typecheck, request):
    if mode == "install":
        request.getfixturevalue("installed")
    cls, make = _make(kind, typecheck)
    step = jax.jit(lambda s: jax.tree.map(lambda v: v * 2, s))
    if mode == "unflatten_safe":
        step = typecheck_guard.unflatten_safe(step)
    obj = run_cached(step, make(cls), 3)
    typecheck.reset()
    for how, clone in _round_trips(obj):
        assert type(clone) is cls, how
        assert getattr(clone, "tag", "t") == "t" and _equal(clone, obj), how
        # A round-tripped object is a working pytree: it steps, and its treedef
        # is the original's.
        assert jax.tree.structure(clone) == jax.tree.structure(obj), how
        assert _equal(step(clone), step(obj)), how
    assert typecheck.calls == 0  # no round trip and no cache-hit step checks
    if kind != "chex":  # (the chex class checks only its __post_init__'s `self`)
        with pytest.raises(typecheck.errors):
            cls(x=jnp.ones((2, 2)))


def test_pickled_treedef_of_an_adapted_class(installed):
    @struct.dataclass
    class PTree:
        x: jax.Array
        tag: str = struct.field(pytree_node=False, default="t")

    _publish(PTree, "PTree")
    leaves, treedef = jax.tree.flatten(PTree(jnp.ones(2), "u"))
    back = pickle.loads(pickle.dumps(treedef))
    assert back == treedef and hash(back) == hash(treedef)
    assert back.unflatten(leaves).tag == "u"


def test_deepcopy_of_a_guarded_class_is_not_checked(typecheck):
    # unflatten_safe replaces __init__ on the class; copies don't call it.
    cls, make = _make("struct", typecheck)
    obj = make(cls)
    with typecheck_guard.unflatten_safe():
        from typecheck_guard._unflatten._guards import original_of

        assert cls.__init__ is not original_of(cls.__init__)
        typecheck.reset()
        clone = copy.deepcopy(obj)
        restored = pickle.loads(pickle.dumps(obj))
    assert typecheck.calls == 0
    assert _equal(clone, obj) and _equal(restored, obj)
