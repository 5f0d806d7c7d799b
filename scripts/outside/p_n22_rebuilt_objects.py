# Region: objects JAX rebuilds (jit output, tree.map, tree_unflatten) and objects built after
# the class's first unflatten, across class kinds: repr, vars order, pickle bytes, copy,
# mapping protocol (chex), flax serialization, keypaths, replace.
# MODES: install
import common
from common import show, cbeartype
import flax, copy, dataclasses, hashlib, pickle, jax, jax.numpy as jnp, numpy as np, chex, optax
from flax import struct, serialization
from flax.training import train_state
from jaxtyping import Array, Float, jaxtyped


def h(b):
    return hashlib.sha1(b).hexdigest()[:12]


@jaxtyped(typechecker=cbeartype)
@chex.dataclass
class ChexM:
    b: Float[Array, "n"]
    a: Float[Array, "n"]


@jaxtyped(typechecker=cbeartype)
@chex.dataclass(mappable_dataclass=False)
class ChexNM:
    b: Float[Array, "n"]
    a: Float[Array, "n"]


@jaxtyped(typechecker=cbeartype)
@chex.dataclass(frozen=True)
class ChexF:
    b: Float[Array, "n"]
    a: Float[Array, "n"]


@jaxtyped(typechecker=cbeartype)
@chex.dataclass
class ChexPost:
    b: Float[Array, "n"]
    a: Float[Array, "n"]

    def __post_init__(self):
        self.extra = 1


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class St:
    b: Float[Array, "n"]
    m: int = struct.field(pytree_node=False, default=3)
    a: Float[Array, "n"] = None


@jaxtyped(typechecker=cbeartype)
class Node(struct.PyTreeNode):
    b: Float[Array, "n"]
    a: Float[Array, "n"]
    name: str = struct.field(pytree_node=False, default="x")


@jaxtyped(typechecker=cbeartype)
class TS(train_state.TrainState):
    extra: Float[Array, ""] = None


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class StPost:
    b: Float[Array, "n"]
    a: Float[Array, "n"] = None

    def __post_init__(self):
        if self.a is None:
            object.__setattr__(self, "a", self.b)


def describe(label, o):
    show(f"{label} repr", lambda: repr(o), count=False)
    show(f"{label} vars", lambda: list(vars(o)) if hasattr(o, "__dict__") else "-", count=False)
    show(f"{label} pickle", lambda: h(pickle.dumps(o)), count=False)
    show(f"{label} pickle roundtrip vars", lambda: list(vars(pickle.loads(pickle.dumps(o)))), count=False)
    show(f"{label} copy vars", lambda: list(vars(copy.copy(o))), count=False)
    show(f"{label} deepcopy vars", lambda: list(vars(copy.deepcopy(o))), count=False)
    show(f"{label} keys", lambda: list(o.keys()) if hasattr(o, "keys") else "-", count=False)
    show(f"{label} fields", lambda: [f.name for f in dataclasses.fields(o)], count=False)
    show(f"{label} state_dict", lambda: jax.tree.map(lambda v: np.asarray(v).tolist(), serialization.to_state_dict(o)), count=False)
    show(f"{label} msgpack", lambda: h(serialization.to_bytes(o)), count=False)
    show(f"{label} keypaths", lambda: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(o)[0]], count=False)
    show(f"{label} eq self-copy", lambda: all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(o), jax.tree.leaves(copy.copy(o)))), count=False)
    show(f"{label} hash type", lambda: type(o).__hash__ is None, count=False)


def main():
    x = jnp.arange(2.0)
    cases = {
        "ChexM": lambda: ChexM(b=x, a=x + 1),
        "ChexNM": lambda: ChexNM(b=x, a=x + 1),
        "ChexF": lambda: ChexF(b=x, a=x + 1),
                "St": lambda: St(x, 4, x + 1),
        "Node": lambda: Node(x, x + 1),
        "TS": lambda: TS.create(apply_fn=abs, params=flax.core.freeze({"w": x}), tx=optax.sgd(0.1), extra=jnp.zeros(())),
        "StPost": lambda: StPost(x),
    }
    for name, make in cases.items():
        o = make()
        describe(f"{name} built", o)
        j = common.jit(lambda v: v)
        describe(f"{name} jit", j(o))
        describe(f"{name} map", jax.tree.map(lambda v: v, o))
        leaves, td = jax.tree.flatten(o)
        describe(f"{name} unflatten", jax.tree.unflatten(td, leaves))
        try:
            after = make()
        except Exception as e:
            show(f"{name} built after", lambda: (_ for _ in ()).throw(e))
            continue
        describe(f"{name} built after", after)
        show(f"{name} replace after", lambda: repr(o.replace(b=x * 3)) if hasattr(o, "replace") else "-", count=True)

common.main(main)
