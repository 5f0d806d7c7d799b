"""Threads and asyncio tasks: `unflatten_safe` state is per thread and per task, nests,
is restored when its body raises, and `install()`/`uninstall()` racing with class
creation leaves JAX's registry and ours consistent."""

import asyncio
import collections
import contextvars
import dataclasses
import functools as ft
import sys
import threading
import traceback

import chex
import jax
import jax.numpy as jnp
import pytest
from flax import struct

import typecheck_guard
from helpers import make_early
from typecheck_guard._unflatten._state import block as _state, marks

# Unguarded workers check at dispatch on purpose: that is what we count.
pytestmark = pytest.mark.allow_runtime_typechecks

N = 25  # cache-hit calls per worker
WORKERS = 8


class PerWorker:
    """Wraps the fixture's counting checker and also counts per thread or task."""

    def __init__(self, inner):
        self.inner = inner
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, fn):
        checked = self.inner(fn)

        @ft.wraps(checked)
        def counted(*args, **kwargs):
            with self._lock:
                self.counts[_worker()] += 1
            return checked(*args, **kwargs)

        return counted


def _worker() -> str:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task.get_name() if task is not None else threading.current_thread().name


def _setup(typecheck):
    counter = PerWorker(typecheck)
    Early = make_early(counter)
    step = jax.jit(lambda s: s.replace(x=s.x + 1))
    state = Early(jnp.ones(3), jnp.zeros(3))
    # Trace, compile and fill the verdict cache here, so that workers only hit.
    with typecheck_guard.unflatten_safe():
        state = step(step(state))
    counter.counts.clear()
    return counter, Early, step, state


def test_threads_half_guarded(typecheck):
    counter, Early, step, state = _setup(typecheck)
    guarded_step = typecheck_guard.unflatten_safe(step)
    barrier = threading.Barrier(WORKERS)
    results: dict[str, float] = {}
    errors: list[tuple[BaseException, str]] = []

    def work(mode: str) -> None:
        try:
            s = state
            barrier.wait()
            if mode == "with":
                with typecheck_guard.unflatten_safe():
                    for _ in range(N):
                        s = step(s)
            elif mode == "call":
                for _ in range(N):
                    s = guarded_step(s)
            else:
                for _ in range(N):
                    s = step(s)
            assert _state.get() is None
            results[threading.current_thread().name] = float(s.x[0])
        except BaseException as e:  # surfaced below
            errors.append((e, traceback.format_exc()))

    modes = ["with", "call", "with", "call", "plain", "plain", "plain", "plain"]
    threads = [
        threading.Thread(target=work, args=(m,), name=f"{m}-{i}")
        for i, m in enumerate(modes)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(tb for _, tb in errors)
    for t in threads:
        assert results[t.name] == float(state.x[0]) + N
        if t.name.startswith("plain"):
            # The unguarded half still checks on every unflatten...
            assert counter.counts[t.name] >= N, (t.name, counter.counts)
        else:
            # ... while the guarded half, running at the same time, checks nothing.
            assert counter.counts[t.name] == 0, (t.name, counter.counts)


def test_asyncio_tasks_half_guarded(typecheck):
    counter, Early, step, state = _setup(typecheck)
    guarded_step = typecheck_guard.unflatten_safe(step)

    async def work(mode: str) -> float:
        s = state
        if mode == "with":
            with typecheck_guard.unflatten_safe():
                for _ in range(N):
                    s = step(s)
                    await asyncio.sleep(0)  # let the other tasks run in between
        else:
            for _ in range(N):
                s = guarded_step(s) if mode == "call" else step(s)
                await asyncio.sleep(0)
        assert _state.get() is None
        return float(s.x[0])

    async def main() -> list[float]:
        modes = ["with", "plain", "call", "plain"] * 2
        tasks = [
            asyncio.create_task(work(m), name=f"{m}-{i}") for i, m in enumerate(modes)
        ]
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert results == [float(state.x[0]) + N] * 8
    for name in counter.counts:
        assert not name.startswith(("with", "call")), counter.counts
    plain = {n: c for n, c in counter.counts.items() if n.startswith("plain")}
    assert len(plain) == 4 and all(c >= N for c in plain.values()), counter.counts


def test_tasks_and_to_thread_inherit_the_state_they_start_in(typecheck):
    # contextvars semantics: a task (or asyncio.to_thread) copies the context it is
    # created in; a plain thread starts empty.
    counter, Early, step, state = _setup(typecheck)

    def run_steps():
        s = state
        for _ in range(N):
            s = step(s)
        return _state.get() is not None

    async def main():
        with typecheck_guard.unflatten_safe():
            task = asyncio.create_task(asyncio.sleep(0, result="inherits"))
            in_thread = await asyncio.to_thread(run_steps)
        other = await asyncio.to_thread(run_steps)
        return await task, in_thread, other

    assert asyncio.run(main()) == ("inherits", True, False)
    inherited = threading.Thread(target=run_steps, name="bare")
    with typecheck_guard.unflatten_safe():
        inherited.start()
        inherited.join()
    # `to_thread` outside the block, and the bare thread, checked every call.
    assert counter.counts["bare"] >= N
    assert sum(counter.counts.values()) >= 2 * N


def test_nesting(typecheck):
    counter, Early, step, state = _setup(typecheck)
    me = threading.current_thread().name
    guarded_step = typecheck_guard.unflatten_safe(step)

    @typecheck_guard.unflatten_safe
    def loop(s):
        with typecheck_guard.unflatten_safe():
            s = guarded_step(s)
        return step(s)

    with typecheck_guard.unflatten_safe():
        outer = _state.get()
        with typecheck_guard.unflatten_safe():
            state = guarded_step(step(state))
            inner = _state.get()
            assert inner is not None and inner.parent is outer
        assert _state.get() is outer
        state = loop(state)
        assert _state.get() is outer
        state = step(state)
    assert _state.get() is None
    assert counter.counts[me] == 0
    state = guarded_step(loop(state))
    assert _state.get() is None and counter.counts[me] == 0
    step(state)
    assert counter.counts[me] >= 1


def test_exception_in_a_guarded_block_restores_state(typecheck):
    counter, Early, step, state = _setup(typecheck)
    me = threading.current_thread().name

    with pytest.raises(ZeroDivisionError):
        with typecheck_guard.unflatten_safe():
            step(state)
            raise ZeroDivisionError
    assert _state.get() is None

    @typecheck_guard.unflatten_safe
    def fails(s):
        step(s)
        raise KeyError("x")

    with pytest.raises(KeyError):
        fails(state)
    assert _state.get() is None

    # A jitted call that raises (here: at trace time) restores the state too.
    guarded = typecheck_guard.unflatten_safe(jax.jit(lambda s, k: s.x[k]))
    with pytest.raises(TypeError):
        guarded(state, jnp.ones(2))  # float index
    assert _state.get() is None

    # After all that, this thread checks again, and a bad construction raises.
    counter.counts.clear()
    step(state)
    assert counter.counts[me] >= 1
    with pytest.raises(typecheck.errors):
        Early(jnp.ones(3), jnp.ones(4))


def test_exception_raised_by_an_unchecked_unflatten_restores_state():
    # An __init__ run with its check skipped can itself raise: the "skip" marker
    # must not outlive it.
    from beartype import beartype

    @jax.tree_util.register_pytree_node_class
    class Picky:
        @beartype
        def __init__(self, x: object):
            if isinstance(x, str):
                raise ValueError("no strings")
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    treedef = jax.tree.structure(Picky(1))
    with typecheck_guard.unflatten_safe():
        block = _state.get()
        assert treedef.unflatten([2]).x == 2
        with pytest.raises(ValueError, match="no strings"):
            treedef.unflatten(["bad"])
        assert block is not None and _state.get() is block
        assert marks.state == [None]
        with pytest.raises(ValueError, match="no strings"):
            Picky("direct")
    assert _state.get() is None


def test_exception_in_a_thread_does_not_leak_into_others(typecheck):
    counter, Early, step, state = _setup(typecheck)
    barrier = threading.Barrier(2)
    seen: dict[str, object] = {}

    def failing():
        try:
            with typecheck_guard.unflatten_safe():
                barrier.wait()
                raise RuntimeError
        except RuntimeError:
            seen["failing"] = _state.get()

    def watching():
        barrier.wait()
        s = state
        for _ in range(N):
            s = step(s)
        seen["watching"] = _state.get()

    threads = [
        threading.Thread(target=failing, name="failing"),
        threading.Thread(target=watching, name="watching"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"failing": None, "watching": None}
    assert counter.counts["watching"] >= N


def test_context_run_isolates_state():
    ctx = contextvars.copy_context()
    with typecheck_guard.unflatten_safe():
        assert ctx.run(_state.get) is None
        inner = contextvars.copy_context()
    assert inner.run(_state.get) is not None
    assert _state.get() is None


@pytest.mark.filterwarnings("ignore::typecheck_guard.UnadaptedClassesWarning")
def test_install_uninstall_racing_class_creation(typecheck):
    created: list[type] = []
    errors: list[tuple[BaseException, str]] = []
    stop = threading.Event()
    original = jax.tree_util.register_dataclass
    Early = make_early(typecheck)
    early_init = Early.__init__
    step = jax.jit(lambda s: s.replace(x=s.x * 2))
    early = step(Early(jnp.ones(2), jnp.ones(2)))

    progress = threading.Condition()

    def created_since(n: int) -> bool:
        return len(created) >= n + 2

    def toggle():
        # Each state lasts until two more classes were created in it (or while it
        # switched), so that both kinds of class are made, racing the switch.
        try:
            for _ in range(10):
                for action in (typecheck_guard.install, typecheck_guard.uninstall):
                    with progress:
                        n = len(created)
                    action()
                    with progress:
                        assert progress.wait_for(
                            lambda n=n: created_since(n), timeout=120
                        )
        except BaseException as e:
            errors.append((e, traceback.format_exc()))
        finally:
            stop.set()

    def make(kind: str, i: int) -> type:
        if kind == "struct":

            @struct.dataclass
            class S:
                x: jax.Array
                tag: str = struct.field(pytree_node=False, default="t")

            return S
        if kind == "chex":

            @chex.dataclass
            class C:
                x: jax.Array
                tag: str = "t"

            return C

        @jax.tree_util.register_dataclass
        @dataclasses.dataclass
        class D:
            x: jax.Array
            tag: str = dataclasses.field(default="t", metadata=dict(static=True))

        return D

    def create(kind: str):
        try:
            i = 0
            while not stop.is_set():
                cls = make(kind, i)
                obj = cls(x=jnp.full(2, float(i)))
                # (chex flattens every field, `tag` included.)
                back = jax.tree.map(
                    lambda v: v + 1 if isinstance(v, jax.Array) else v, obj
                )
                assert type(back) is cls and back.tag == "t"
                assert float(back.x[0]) == i + 1
                with progress:
                    created.append(cls)
                    progress.notify_all()
                i += 1
        except BaseException as e:
            errors.append((e, traceback.format_exc()))

    def guard_loop():
        try:
            s = early
            while not stop.is_set():
                with typecheck_guard.unflatten_safe():
                    s = step(s)
        except BaseException as e:
            errors.append((e, traceback.format_exc()))

    threads = [threading.Thread(target=toggle)]
    threads += [
        threading.Thread(target=create, args=(k,))
        for k in ("struct", "chex", "dataclass")
    ]
    threads.append(threading.Thread(target=guard_loop))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(tb for _, tb in errors)

    typecheck_guard.uninstall()
    assert jax.tree_util.register_dataclass is original
    assert Early.__init__ is early_init
    from jax._src.tree_util import _registry

    from typecheck_guard._adapt._codegen import is_generated
    from typecheck_guard._unflatten._records import unflatten_of

    assert len(created) >= 30
    for cls in created:
        # Registered exactly once (JAX refuses a second registration), and our
        # record agrees with what JAX holds.
        entry = _registry[cls]
        ours = typecheck_guard._adapt._register.adapted_how(cls)
        assert (ours is not None) == is_generated(unflatten_of(entry)) or (
            ours == "chex.dataclass"
        ), cls
        leaves, treedef = jax.tree.flatten(cls(x=jnp.ones(2)))
        assert treedef.unflatten(leaves).tag == "t"
    # Some classes were created while installed, some while not.
    kinds = {
        typecheck_guard._adapt._register.adapted_how(c) is not None for c in created
    }
    assert kinds == {True, False}


_SCAN_MIDWAY = """
import dataclasses, sys
import jax
import typecheck_guard
from typecheck_guard._compat import _jax as _jaxcompat

def register_a_class():
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Registered:
        x: int

scan = sys.argv[1]
# The frames that read the registry, ours and the ones they call.
readers = {"at_risk", "unadapted", "_sync", "registry_items"}
registered = 0

def before_each_bytecode(frame, event, arg):
    global registered
    if event == "opcode" and registered < 200:
        registered += 1
        register_a_class()  # what another thread switched in here could do
    return before_each_bytecode

def tracer(frame, event, arg):
    if event == "call" and frame.f_code.co_name in readers:
        frame.f_trace_opcodes = True
        return before_each_bytecode
    return None

for _ in range(3):
    register_a_class()  # so that unflatten_safe has something new to scan
    sys.settrace(tracer)
    try:
        if scan == "unadapted":
            typecheck_guard.unadapted()
        else:
            with typecheck_guard.unflatten_safe():
                pass
    finally:
        sys.settrace(None)

# The snapshot itself: no Python code may run inside it (a profiler sees every
# Python call, and every C call that could lead to one).
calls = []
def profile(frame, event, arg):
    if frame.f_code is not _jaxcompat.registry_items.__code__ and event == "call":
        calls.append(frame.f_code.co_name)
register_a_class()
sys.setprofile(profile)
try:
    _jaxcompat.registry_items()
finally:
    sys.setprofile(None)
# `_load` is `functools.cache`d: its wrapper is C, and it was loaded above.
print(registered, len(calls))
"""


@pytest.mark.parametrize("scan", ["unadapted", "unflatten_safe"])
def test_registry_scans_survive_registration_midway(scan):
    # install() lists unadapted classes and `unflatten_safe` guards new ones: both
    # read JAX's registry while other threads may add to it. Another thread can only
    # run between two bytecodes of ours (where the interpreter checks for a switch
    # request, and where Python 3.12+ starts garbage collections and their
    # finalizers), or inside a C call that runs Python code: before 3.12 an
    # allocation in `list(d.items())` could start a collection whose callbacks ran
    # Python code and failed us with "dictionary changed size during iteration".
    # We make the other thread register a class at every one of those points,
    # deterministically, without waiting for the collector: an opcode tracer in the
    # frames that read the registry registers one before each bytecode, and the
    # read itself (`_jaxcompat.registry_items`) must run no Python code at all. In a
    # fresh interpreter, so that the registry holds only what this test puts there.
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _SCAN_MIDWAY, scan],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    registered, python_calls_in_snapshot = map(int, out.stdout.split())
    assert registered > 0  # registrations did happen inside the reads
    assert python_calls_in_snapshot == 0


@pytest.mark.allow_runtime_typechecks  # the caller's rebuilds check, as without us
def test_a_block_in_a_suspended_generator_does_not_cover_its_caller(typecheck):
    # A context variable set in a generator's body stays set in the caller while the
    # generator is suspended (Python's semantics); the block covers the generator's
    # code, not the caller's.
    Early = make_early(typecheck)

    def produce():
        with typecheck_guard.unflatten_safe():
            yield jax.tree.map(lambda v: v, Early(jnp.ones(2), jnp.ones(2)))
            yield None

    items = produce()
    next(items)  # suspended inside its block
    typecheck.reset()
    with pytest.raises(typecheck.errors):
        jax.tree.map(lambda v: v.astype(jnp.int32), Early(jnp.ones(2), jnp.ones(2)))
    next(items)
    items.close()
    assert _state.get() is None
