"""The scenarios of `typecheck-guard bench`, each runnable under every mode.

A scenario is a `Case`: a name for `--scenario` and the table, the modules it needs
beyond jax and jaxtyping (a missing one makes it a skipped row, with the reason), and
a `prepare` function. To add one, write its `prepare` and append a `Case` to `CASES`.

A scenario builds its classes in a factory function. The classes the baseline, "no
plugin" and both `unflatten_safe` modes use are built once, before anything is
installed (so they are registered by JAX's own route, the way a user without the
plugin has them). The `install()` mode calls the factory again while `install()` is
in effect: `install()` only adapts classes defined after it, and JAX cannot
unregister a class, so that mode needs classes of its own.
"""

# No `from __future__ import annotations` here: the typechecked classes below are
# defined in functions that import their annotation names locally, and a checker
# can't resolve string annotations against a function's locals. jaxtyping then
# skips the check without a word, and every ratio would read 1.0x.
import contextlib
import dataclasses
import inspect
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from ._measure import Run

__all__ = [
    "CASES",
    "MODES",
    "MODE_LABELS",
    "PRESETS",
    "Case",
    "Preset",
    "SCENARIOS",
    "Unavailable",
    "load_checker",
    "missing",
    "mode_context",
    "resnet50_shapes",
    "flax_state_prepare",
]


class Preset(NamedTuple):
    name: str
    rounds: int
    block_s: float
    state_leaves: int
    """Leaves in the `PyTree` field of the flax.struct state."""
    nnx_dims: tuple[int, int, int, int]
    """din, dmid, dout, batch of the Flax NNX model."""
    resnet_width_divisor: int
    """ResNet-50 channel widths are divided by this (1: the real shapes)."""
    resnet_dtype: str
    eager_leaves: int
    sweep_leaves: tuple[int, ...]


PRESETS: dict[str, Preset] = {
    # For the test suite: every code path, tiny sizes, timings meaningless.
    "smoke": Preset("smoke", 2, 0.001, 8, (2, 8, 3, 4), 16, "float32", 8, (1, 10, 100)),
    "quick": Preset(
        "quick",
        5,
        0.02,
        200,
        (2, 64, 3, 32),
        8,
        "float32",
        200,
        (1, 10, 100, 1000, 10_000),
    ),
    "full": Preset(
        "full",
        15,
        0.1,
        200,
        (2, 64, 3, 32),
        1,
        "bfloat16",
        200,
        (1, 3, 10, 30, 100, 300, 1000, 3000, 10_000),
    ),
}

# Column order of the table. Not every scenario has every mode.
MODES = ("none", "unflatten_safe", "unflatten_safe_with", "cache", "install")
MODE_LABELS = {
    "none": "no plugin",
    "unflatten_safe": "unflatten_safe(fn)",
    "unflatten_safe_with": "with unflatten_safe()",
    "cache": "cache_pytree_checks()",
    "install": "install()",
}
_JIT_MODES = ("none", "unflatten_safe", "unflatten_safe_with", "install")


class Unavailable(Exception):
    """This mode or checker can't run here; the message says why."""


def load_checker(name: str) -> Callable[[Any], Any]:
    """The typechecker decorator called `name`, or `Unavailable`."""
    if name == "beartype":
        try:
            from beartype import beartype
        except ImportError:
            raise Unavailable(
                "beartype is not installed (pip install 'typecheck-guard[beartype]')"
            ) from None
        return beartype
    if name == "typeguard":
        try:
            import typeguard
        except ImportError:
            raise Unavailable(
                "typeguard is not installed (pip install 'typecheck-guard[typeguard]' "
                "for typeguard 2.13.3, the version jaxtyping recommends)"
            ) from None
        from ..._compat._versions import installed, parse

        version = installed("typeguard") or "0"
        if parse(version) >= (3,):
            raise Unavailable(
                f"typeguard {version} checks nothing under jaxtyped (it can't "
                "instrument jaxtyping's generated code and only warns); install "
                "typeguard==2.13.3 to measure it"
            )
        return typeguard.typechecked
    raise Unavailable(f"unknown checker {name!r}")


@contextlib.contextmanager
def _installed() -> Iterator[None]:
    import typecheck_guard

    with warnings.catch_warnings():
        # The plain classes of the other modes are registered before install() and
        # are reported; that is the point of having them.
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    yield


def _cache_switch() -> Callable[[bool], Any] | None:
    import typecheck_guard

    return getattr(typecheck_guard, "cache_pytree_checks", None)


@contextlib.contextmanager
def mode_context(mode: str) -> Iterator[None]:
    """The process state a user in `mode` runs under, for both the definition of the
    mode's classes and its measurement. Leaves nothing installed or guarded."""
    import typecheck_guard

    try:
        with contextlib.ExitStack() as stack:
            switch = _cache_switch()
            if mode == "install":
                stack.enter_context(_installed())
            elif mode == "cache":
                if switch is None:
                    raise Unavailable(_NO_CACHE)
                stack.enter_context(switch(True))
            elif switch is not None:
                # "No plugin" means no PyTree cache either, whatever the default.
                stack.enter_context(switch(False))
            yield
    finally:
        # Also puts back every `__init__` that `unflatten_safe` guarded.
        typecheck_guard.uninstall()


_NO_CACHE = "typecheck_guard.cache_pytree_checks is not available in this version"


def _carry(step: Callable[[Any], Any], state: Any) -> Run:
    """`run(n)`: `state = step(state)` n times, like a training loop."""
    import jax

    box = [state]

    def run(n: int) -> None:
        s = box[0]
        for _ in range(n):
            s = step(s)
        box[0] = jax.block_until_ready(s)

    return run


def _in_unflatten_safe(run: Run) -> Run:
    import typecheck_guard

    def guarded(n: int) -> None:
        with typecheck_guard.unflatten_safe():
            run(n)

    return guarded


class Prepared(NamedTuple):
    baseline: Run
    """The workload on the plain classes; timed with `jaxtyping_disable=True`."""
    make: Callable[[str], Run]
    """The checked workload of one mode; called inside `mode_context(mode)`."""


class Case(NamedTuple):
    scenario: str
    """What `--scenario` selects, and the `scenario` of a row in `--json`."""
    variant: str
    """Which form of the scenario (`--json`'s `variant`)."""
    label: str
    """The case's name in the table: what it measures, in a few words."""
    title: str
    """What it measures, in a sentence."""
    modes: tuple[str, ...]
    prepare: Callable[[Callable[[Any], Any], Preset], Prepared]
    needs: tuple[str, ...] = ()
    """Modules it imports beyond jax and jaxtyping: without one, it is skipped."""
    notes: dict[str, str] = {}


# Where a module the scenarios need comes from: one of our extras, or itself; and
# what an extra brings along (flax depends on optax).
_EXTRA = {"flax": "flax", "equinox": "equinox", "chex": "chex"}
_BRINGS = {"flax": ("optax",)}


def missing(modules: Sequence[str]) -> str | None:
    """Why a case that imports `modules` can't run here, or `None` if it can."""
    import importlib.util

    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    names = " and ".join(absent)
    extras = sorted({_EXTRA[m] for m in absent if m in _EXTRA})
    brought = {m for extra in extras for m in _BRINGS.get(extra, ())}
    others = [m for m in absent if m not in _EXTRA and m not in brought]
    fix = []
    if extras:
        fix.append(f"pip install 'typecheck-guard[{','.join(extras)}]'")
    if others:
        fix.append(f"pip install {' '.join(others)}")
    verb = "is" if len(absent) == 1 else "are"
    return f"{names} {verb} not installed ({'; '.join(fix)})"


# --- A flax.struct state returned from jit -------------------------------------------


def _state_define(checker: Any) -> tuple[type, Any]:
    import jax
    from flax import struct
    from jaxtyping import Array, Float, PyTree, jaxtyped

    @jaxtyped(typechecker=checker)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]
        step: Float[Array, ""]
        name: str = struct.field(pytree_node=False, default="node")

    @jax.jit
    def step(s: Any) -> Any:
        # Negation keeps magnitudes fixed: no drift into denormals over a long run.
        return s.replace(params=jax.tree.map(lambda p: -p, s.params), step=s.step + 1)

    return Node, step


def _state_value(Node: type, leaves: int) -> Any:
    import jax.numpy as jnp

    params = {f"w{i:05d}": jnp.full((16,), 1.0 + i) for i in range(leaves)}
    return Node(params, jnp.zeros(()))


def flax_state_prepare(checker: Any, leaves: int) -> Prepared:
    """A jitted step returning a jaxtyped flax.struct state whose
    `PyTree[Float[Array, "..."]]` field holds `leaves` arrays: the case of jaxtyping's
    issue #213, "jaxtyping with JAX severely slowing down training speed"."""
    import typecheck_guard

    Node, step = _state_define(checker)
    baseline = _carry(step, _state_value(Node, leaves))

    def make(mode: str) -> Run:
        if mode == "install":
            Adapted, adapted_step = _state_define(checker)
            return _carry(adapted_step, _state_value(Adapted, leaves))
        if mode == "unflatten_safe":
            return _carry(
                typecheck_guard.unflatten_safe(step), _state_value(Node, leaves)
            )
        run = _carry(step, _state_value(Node, leaves))
        return _in_unflatten_safe(run) if mode == "unflatten_safe_with" else run

    return Prepared(baseline, make)


# --- A custom node state and a `__post_init__` state returned from jit ------------------


def _other_state_define(checker: Any, variant: str) -> tuple[type, Any]:
    import jax
    from jaxtyping import Array, Float, PyTree, jaxtyped

    if variant == "custom":

        @jax.tree_util.register_pytree_node_class
        class Node:
            @jaxtyped(typechecker=checker)
            def __init__(
                self, params: PyTree[Float[Array, "..."]], step: Float[Array, ""]
            ):
                self.params = params
                self.step = step

            def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
                return (self.params, self.step), None

            @classmethod
            def tree_unflatten(cls, aux: None, children: tuple[Any, ...]) -> Any:
                # As in most tutorials: through the (typechecked) constructor.
                return cls(*children)

            def replace(self, **changes: Any) -> Any:
                return Node(**{"params": self.params, "step": self.step, **changes})

    else:
        assert variant == "post_init"
        from flax import struct

        @jaxtyped(typechecker=checker)
        @struct.dataclass
        class Node:  # type: ignore[no-redef]
            params: PyTree[Float[Array, "..."]]
            step: Float[Array, ""]

            def __post_init__(self) -> None:
                # Work JAX's unflatten runs every time: a derived attribute.
                object.__setattr__(self, "count", len(self.params))

    @jax.jit
    def step(s: Any) -> Any:
        return s.replace(params=jax.tree.map(lambda p: -p, s.params), step=s.step + 1)

    return Node, step


def _other_state(variant: str) -> Callable[[Any, Preset], Prepared]:
    def prepare(checker: Any, preset: Preset) -> Prepared:
        import typecheck_guard

        Node, step = _other_state_define(checker, variant)
        leaves = preset.state_leaves
        baseline = _carry(step, _state_value(Node, leaves))

        def make(mode: str) -> Run:
            if mode == "install":
                Covered, covered_step = _other_state_define(checker, variant)
                return _carry(covered_step, _state_value(Covered, leaves))
            if mode == "unflatten_safe":
                return _carry(
                    typecheck_guard.unflatten_safe(step), _state_value(Node, leaves)
                )
            run = _carry(step, _state_value(Node, leaves))
            return _in_unflatten_safe(run) if mode == "unflatten_safe_with" else run

        return Prepared(baseline, make)

    return prepare


# --- A PAX-style ResNet-50: a tree of custom nodes, flattened and unflattened ---------


def _pax_define(checker: Any, preset: Preset) -> Any:
    """A ResNet-50 built as in PAX: one custom Python node per layer, each with a
    typechecked `__init__`, whose `tree_unflatten` calls the constructor, and an Adam
    state over its parameters; what PAX's performance notebook flattens and
    unflattens on every step."""
    import jax
    import jax.numpy as jnp
    from jaxtyping import Array, Float, Int, PyTree, jaxtyped

    def node(cls: type) -> type:
        fields = tuple(inspect.signature(cls.__init__).parameters)[1:]

        def tree_flatten(self: Any) -> tuple[tuple[Any, ...], None]:
            return tuple(getattr(self, f) for f in fields), None

        def tree_unflatten(klass: type, aux: None, children: Any) -> Any:
            return klass(*children)

        cls.tree_flatten = tree_flatten  # type: ignore[attr-defined]
        cls.tree_unflatten = classmethod(tree_unflatten)  # type: ignore[attr-defined]
        return jax.tree_util.register_pytree_node_class(cls)

    @node
    class Conv:
        @jaxtyped(typechecker=checker)
        def __init__(self, kernel: Float[Array, "h w cin cout"]):
            self.kernel = kernel

    @node
    class BatchNorm:
        @jaxtyped(typechecker=checker)
        def __init__(self, scale: Float[Array, " c"], bias: Float[Array, " c"]):
            self.scale = scale
            self.bias = bias

    @node
    class Linear:
        @jaxtyped(typechecker=checker)
        def __init__(self, kernel: Float[Array, "i o"], bias: Float[Array, " o"]):
            self.kernel = kernel
            self.bias = bias

    @node
    class Block:
        @jaxtyped(typechecker=checker)
        def __init__(self, convs: list, norms: list):  # of Conv, of BatchNorm
            self.convs = convs
            self.norms = norms

    @node
    class ResNet:
        @jaxtyped(typechecker=checker)
        # Submodules as `Any`: beartype keys a local class in a hint by its name,
        # and the install() mode defines a second `Conv`, `Block`, ...
        def __init__(self, stem: Any, norm: Any, blocks: list, head: Any):
            self.stem = stem
            self.norm = norm
            self.blocks = blocks
            self.head = head

    @node
    class Adam:
        @jaxtyped(typechecker=checker)
        def __init__(
            self,
            count: Int[Array, ""],
            mu: PyTree[Float[Array, "..."]],
            nu: PyTree[Float[Array, "..."]],
        ):
            self.count = count
            self.mu = mu
            self.nu = nu

    dtype = jnp.dtype(preset.resnet_dtype)
    shapes = resnet50_shapes(preset.resnet_width_divisor)

    def zeros(shape: tuple[int, ...]) -> Any:
        return jnp.zeros(shape, dtype)

    def norm(p: dict[str, Any]) -> Any:
        return BatchNorm(zeros(p["scale"]), zeros(p["bias"]))

    blocks = []
    for name, block in shapes.items():
        if not name.startswith("Bottleneck"):
            continue
        convs = [Conv(zeros(block[f"Conv_{i}"]["kernel"])) for i in range(3)]
        norms = [norm(block[f"BatchNorm_{i}"]) for i in range(3)]
        if "conv_proj" in block:
            convs.append(Conv(zeros(block["conv_proj"]["kernel"])))
            norms.append(norm(block["norm_proj"]))
        blocks.append(Block(convs, norms))
    model = ResNet(
        Conv(zeros(shapes["conv_init"]["kernel"])),
        norm(shapes["bn_init"]),
        blocks,
        Linear(zeros(shapes["Dense_0"]["kernel"]), zeros(shapes["Dense_0"]["bias"])),
    )
    zeros_like = jax.tree.map(jnp.zeros_like, model)
    return model, Adam(jnp.zeros((), jnp.int32), zeros_like, zeros_like)


def _pax_prepare(checker: Any, preset: Preset) -> Prepared:
    pair = _pax_define(checker, preset)

    def make(mode: str) -> Run:
        if mode == "install":
            return _round_trips(_pax_define(checker, preset))
        run = _round_trips(pair)
        return _in_unflatten_safe(run) if mode == "unflatten_safe_with" else run

    return Prepared(_round_trips(pair), make)


# --- 10 floats through jit, as raw arrays and in four kinds of pytree ------------------


def _tiny_func(x: Any, y: Any) -> Any:
    return (x - y) / (x + y)


def _small_define(checker: Any, variant: str) -> tuple[Any, Callable[[Any], Any]]:
    """`(x - y) / (x + y)` jitted, and how to wrap a raw array for `variant`: the
    table of Equinox's issue #961, "Slow Initialization"."""
    import jax
    import jax.numpy as jnp
    from jaxtyping import Array, Float, jaxtyped

    class Ops:
        def __add__(self, other: Any) -> Any:
            return jax.tree.map(jnp.add, self, other)

        def __sub__(self, other: Any) -> Any:
            return jax.tree.map(jnp.subtract, self, other)

        def __truediv__(self, other: Any) -> Any:
            return jax.tree.map(jnp.divide, self, other)

    if variant == "arrays":

        @jax.jit
        @jaxtyped(typechecker=checker)
        def func(x: Float[Array, " n"], y: Float[Array, " n"]) -> Float[Array, " n"]:
            return (x - y) / (x + y)

        return func, lambda a: a
    if variant == "equinox":
        import equinox as eqx

        @jaxtyped(typechecker=checker)
        class EqxArray(Ops, eqx.Module):
            array: Float[Array, " n"]

        return jax.jit(_tiny_func), EqxArray
    if variant == "flax.struct":
        from flax import struct

        @jaxtyped(typechecker=checker)
        @struct.dataclass
        class FlaxArray(Ops):
            array: Float[Array, " n"]

        return jax.jit(_tiny_func), FlaxArray
    assert variant == "custom"

    @jax.tree_util.register_pytree_node_class
    @jaxtyped(typechecker=checker)
    @dataclasses.dataclass
    class CustomArray(Ops):
        array: Float[Array, " n"]

        def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
            return (self.array,), None

        @classmethod
        def tree_unflatten(cls, aux: None, children: tuple[Any, ...]) -> "CustomArray":
            # As in most tutorials: through the (typechecked) constructor.
            return cls(*children)

    return jax.jit(_tiny_func), CustomArray


def _small_calls(func: Any, wrap: Callable[[Any], Any]) -> Run:
    import jax
    import jax.numpy as jnp

    x = wrap(jnp.linspace(0.0, 1.0, 10))
    y = wrap(jnp.linspace(1.0, 2.0, 10))

    def run(n: int) -> None:
        out = None
        for _ in range(n):
            out = func(x, y)
        jax.block_until_ready(out)

    return run


def _small(variant: str) -> Callable[[Any, Preset], Prepared]:
    def prepare(checker: Any, preset: Preset) -> Prepared:
        import typecheck_guard

        func, wrap = _small_define(checker, variant)
        baseline = _small_calls(func, wrap)

        def make(mode: str) -> Run:
            if mode == "install":
                return _small_calls(*_small_define(checker, variant))
            if mode == "unflatten_safe":
                return _small_calls(typecheck_guard.unflatten_safe(func), wrap)
            run = _small_calls(func, wrap)
            return _in_unflatten_safe(run) if mode == "unflatten_safe_with" else run

        return Prepared(baseline, make)

    return prepare


# --- A Flax NNX train step -----------------------------------------------------------


def _nnx_define(checker: Any, dims: tuple[int, int, int, int]) -> Callable[..., Run]:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jaxtyping import Array, Float, jaxtyped

    class Model(nnx.Module):
        @jaxtyped(typechecker=checker)
        def __init__(self, din: int, dmid: int, dout: int, rngs: nnx.Rngs):
            self.linear = nnx.Linear(din, dmid, rngs=rngs)
            self.bn = nnx.BatchNorm(dmid, rngs=rngs)
            self.dropout = nnx.Dropout(0.2, rngs=rngs)
            self.linear_out = nnx.Linear(dmid, dout, rngs=rngs)

        @jaxtyped(typechecker=checker)
        def __call__(self, x: Float[Array, "b din"]) -> Float[Array, "b dout"]:
            x = nnx.relu(self.dropout(self.bn(self.linear(x))))
            return self.linear_out(x)

    # flax 0.11 made the model an argument of `Optimizer.update`; before, the
    # optimizer held it (`update(grads)`). We measure both.
    takes_model = "model" in inspect.signature(nnx.Optimizer.update).parameters

    @nnx.jit
    def train_step(model: Model, optimizer: Any, metrics: Any, x: Any, y: Any) -> Any:
        @jaxtyped(typechecker=checker)
        def loss_fn(model: Model) -> Float[Array, ""]:
            y_pred = model(x)
            return ((y_pred - y) ** 2).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        if takes_model:
            optimizer.update(model, grads)
        else:
            optimizer.update(grads)
        metrics.update(loss=loss)
        return loss

    din, dmid, dout, batch = dims

    def workload(wrap: Callable[[Any], Any] = lambda f: f) -> Run:
        model = Model(din, dmid, dout, rngs=nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))
        x, y = jnp.ones((batch, din)), jnp.zeros((batch, dout))
        step = wrap(train_step)

        def run(n: int) -> None:
            loss = None
            for _ in range(n):
                loss = step(model, optimizer, metrics, x, y)
            jax.block_until_ready(loss)

        return run

    return workload


def _nnx_prepare(checker: Any, preset: Preset) -> Prepared:
    import typecheck_guard

    workload = _nnx_define(checker, preset.nnx_dims)

    def make(mode: str) -> Run:
        if mode == "install":
            return _nnx_define(checker, preset.nnx_dims)()
        if mode == "unflatten_safe":
            return workload(lambda f: typecheck_guard.unflatten_safe(f))
        run = workload()
        return _in_unflatten_safe(run) if mode == "unflatten_safe_with" else run

    return Prepared(workload(), make)


# --- A ResNet-50 TrainState round trip -----------------------------------------------


def resnet50_shapes(width_divisor: int = 1, classes: int = 1000) -> dict[str, Any]:
    """The parameter shapes of a ResNet-50 (Flax naming), 161 arrays.

    `width_divisor` divides every channel width (not the 7x7 / 3x3 kernel sizes nor
    the 3 input channels): 1 gives the real 25.6M-parameter shapes.
    """

    def w(c: int) -> int:
        return max(1, c // width_divisor)

    def bn(c: int) -> dict[str, tuple[int, ...]]:
        return {"scale": (c,), "bias": (c,)}

    params: dict[str, Any] = {
        "conv_init": {"kernel": (7, 7, 3, w(64))},
        "bn_init": bn(w(64)),
    }
    cin = w(64)
    index = 0
    for blocks, features in zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True):
        f, out = w(features), w(4 * features)
        for b in range(blocks):
            block: dict[str, Any] = {
                "Conv_0": {"kernel": (1, 1, cin, f)},
                "BatchNorm_0": bn(f),
                "Conv_1": {"kernel": (3, 3, f, f)},
                "BatchNorm_1": bn(f),
                "Conv_2": {"kernel": (1, 1, f, out)},
                "BatchNorm_2": bn(out),
            }
            if b == 0:
                block["conv_proj"] = {"kernel": (1, 1, cin, out)}
                block["norm_proj"] = bn(out)
            params[f"BottleneckResNetBlock_{index}"] = block
            cin = out
            index += 1
    params["Dense_0"] = {"kernel": (cin, classes), "bias": (classes,)}
    return params


def _trainstate_define(checker: Any, preset: Preset) -> Any:
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state
    from jaxtyping import Array, Float, PyTree, jaxtyped

    from ..._compat._versions import installed, parse

    found = installed("jaxtyping") or "0"
    if parse(found) < (0, 3, 3):
        raise Unavailable(
            f"jaxtyping {found} can't resolve optax's `ArrayTree` forward reference "
            "in a typechecked TrainState subclass (fixed in jaxtyping 0.3.3)"
        )

    @jaxtyped(typechecker=checker)
    class State(train_state.TrainState):
        params: PyTree[Float[Array, "..."]]

    def apply_fn(params: Any, x: Any) -> Any:
        return x

    dtype = jnp.dtype(preset.resnet_dtype)
    shapes = resnet50_shapes(preset.resnet_width_divisor)
    params = jax.tree.map(
        lambda shape: jnp.zeros(shape, dtype),
        shapes,
        is_leaf=lambda x: isinstance(x, tuple),
    )
    return State.create(apply_fn=apply_fn, params=params, tx=optax.adam(1e-3))


def _round_trips(state: Any) -> Run:
    import jax

    flatten, unflatten = jax.tree_util.tree_flatten, jax.tree_util.tree_unflatten
    box = [state]

    def run(n: int) -> None:
        s = box[0]
        for _ in range(n):
            leaves, treedef = flatten(s)
            s = unflatten(treedef, leaves)
        box[0] = s

    return run


def _trainstate_prepare(checker: Any, preset: Preset) -> Prepared:
    state = _trainstate_define(checker, preset)

    def make(mode: str) -> Run:
        if mode == "install":
            return _round_trips(_trainstate_define(checker, preset))
        run = _round_trips(state)
        return _in_unflatten_safe(run) if mode == "unflatten_safe_with" else run

    return Prepared(_round_trips(state), make)


# --- An eager PyTree[...] check ------------------------------------------------------


def _eager_prepare(checker: Any, preset: Preset) -> Prepared:
    import jax.numpy as jnp
    from jaxtyping import Array, Float, PyTree, jaxtyped

    @jaxtyped(typechecker=checker)
    def evaluate(params: PyTree[Float[Array, "..."]]) -> None:
        pass

    params = {f"w{i:05d}": jnp.full((16,), 1.0) for i in range(preset.eager_leaves)}

    def run(n: int) -> None:
        for _ in range(n):
            evaluate(params)

    def make(mode: str) -> Run:
        if mode in ("cache", "install") and _cache_switch() is None:
            raise Unavailable(_NO_CACHE)
        return run

    return Prepared(run, make)


def _state_case(checker: Any, preset: Preset) -> Prepared:
    return flax_state_prepare(checker, preset.state_leaves)


_NNX_NOTE = (
    "nnx.jit updates the model in place and builds any new object with "
    "object.__new__ (flax/nnx/pytreelib.py, _graph_node_create_empty): no check runs "
    "per call, so the plugin has nothing to remove"
)
_SMALL = (
    "(x - y) / (x + y) through jit, a few microseconds a call, x and y passed as {}"
)

CASES: tuple[Case, ...] = (
    Case(
        "flax-state",
        "flax.struct",
        "flax.struct state from jit",
        "a jitted step returns a jaxtyped flax.struct state whose "
        "PyTree[Float[Array, '...']] field holds {state_leaves} arrays",
        _JIT_MODES,
        _state_case,
        needs=("flax",),
    ),
    Case(
        "other-states",
        "custom",
        "custom node state from jit",
        "a jitted step returns a custom node (tree_unflatten calls the typechecked "
        "constructor) whose PyTree[Float[Array, '...']] field holds {state_leaves} "
        "arrays",
        _JIT_MODES,
        _other_state("custom"),
    ),
    Case(
        "other-states",
        "post_init",
        "__post_init__ state from jit",
        "a jitted step returns a jaxtyped flax.struct whose __post_init__ derives an "
        "attribute, with a PyTree[Float[Array, '...']] field of {state_leaves} arrays",
        _JIT_MODES,
        _other_state("post_init"),
        needs=("flax",),
    ),
    Case(
        "ten-floats",
        "arrays",
        "10 floats, raw arrays",
        _SMALL.format("raw arrays"),
        _JIT_MODES,
        _small("arrays"),
    ),
    Case(
        "ten-floats",
        "equinox",
        "10 floats, eqx.Module",
        _SMALL.format("an eqx.Module"),
        _JIT_MODES,
        _small("equinox"),
        needs=("equinox",),
    ),
    Case(
        "ten-floats",
        "flax.struct",
        "10 floats, flax.struct",
        _SMALL.format("a flax.struct"),
        _JIT_MODES,
        _small("flax.struct"),
        needs=("flax",),
    ),
    Case(
        "ten-floats",
        "custom",
        "10 floats, custom node",
        _SMALL.format("a custom node whose tree_unflatten calls the constructor"),
        _JIT_MODES,
        _small("custom"),
    ),
    Case(
        "nnx",
        "nnx",
        "Flax NNX train step",
        "the train step of Flax's performance guide under nnx.jit, with a "
        "typechecked model and loss",
        _JIT_MODES,
        _nnx_prepare,
        needs=("flax", "optax"),
        notes={"none": _NNX_NOTE},
    ),
    Case(
        "trainstate",
        "TrainState",
        "ResNet-50 TrainState round trip",
        "tree_flatten + tree_unflatten of a jaxtyped TrainState subclass holding "
        "ResNet-50 parameters ({resnet_shapes}) and an optax adam state",
        ("none", "unflatten_safe_with", "install"),
        _trainstate_prepare,
        needs=("flax", "optax"),
    ),
    Case(
        "pax",
        "custom nodes",
        "PAX-style ResNet-50 round trip",
        "tree_flatten + tree_unflatten of a ResNet-50 ({resnet_shapes}) built from "
        "custom nodes with typechecked __init__ (tree_unflatten calls it), and an Adam "
        "state over its parameters",
        ("none", "unflatten_safe_with", "install"),
        _pax_prepare,
    ),
    Case(
        "eager",
        "PyTree",
        "eager PyTree check",
        "a function called outside jit checks a PyTree[Float[Array, '...']] "
        "argument of {eager_leaves} arrays",
        ("none", "cache", "install"),
        _eager_prepare,
    ),
)

SCENARIOS = tuple(dict.fromkeys(case.scenario for case in CASES))
"""The names `--scenario` takes, in the order of the table."""
