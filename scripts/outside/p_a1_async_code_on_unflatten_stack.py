# Family A (stack evidence): user code that runs ON TOP of an unflatten's stack without being
# called by it -- a signal handler (a preemption handler that builds a checkpoint object),
# the debugger's prompt (pdb stopped in tree_unflatten), a weakref finalizer / __del__ --
# builds an object.  That is a construction in the user's code: plain, its check runs;
# it must still run with the plugin.
# MODES: install
import common
from common import show, cbeartype, out
import dataclasses, io, pdb, signal, weakref, gc, sys
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped

HOOK = {"fn": None}


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class Node:
    value: Float[Array, "n"]
    unit: str

    def tree_flatten(self):
        return (self.value,), self.unit

    @classmethod
    def tree_unflatten(cls, unit, children):
        if HOOK["fn"] is not None:
            HOOK["fn"]()  # stands for "something happens while JAX rebuilds"
        return cls(children[0], unit)


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class Other:  # an unrelated checked class
    value: Float[Array, "n"]


RESULTS = []


def build_bad():
    for C, args in ((Node, ("not an array", "m")), (Other, ("not an array",))):
        c0 = common.checks()
        try:
            C(*args)
            RESULTS.append(f"{C.__name__}(bad) built, checks={common.checks() - c0}")
        except Exception as e:  # noqa: BLE001
            RESULTS.append(f"{C.__name__}(bad) {type(e).__name__}, checks={common.checks() - c0}")


def main():
    n = Node(jnp.ones(2), "m")

    # 1. a signal handler (SIGUSR1 raised while tree_unflatten runs)
    signal.signal(signal.SIGUSR1, lambda s, f: build_bad())
    HOOK["fn"] = lambda: signal.raise_signal(signal.SIGUSR1)
    RESULTS.clear()
    show("signal: tree.map", lambda: jax.tree.map(lambda v: v + 1, n).value.tolist(), count=False)
    out("signal: handler saw", RESULTS)

    # 2. pdb stopped in tree_unflatten; the user types expressions at the prompt
    buf = io.StringIO()

    def stop_in_debugger():
        cmds = io.StringIO("p Node('not an array', 'm')\np Other('not an array')\ncontinue\n")
        dbg = pdb.Pdb(stdin=cmds, stdout=buf, nosigint=True)
        dbg.use_rawinput = False
        dbg.set_trace(sys._getframe(1))

    HOOK["fn"] = stop_in_debugger
    show("pdb: tree.map", lambda: jax.tree.map(lambda v: v + 1, n).value.tolist(), count=False)
    sys.settrace(None)
    lines = [l for l in buf.getvalue().splitlines() if "Error" in l or "Node(" in l or "Other(" in l]
    out("pdb: prompt printed", [l.split("(Pdb)")[-1].strip()[:90] for l in lines])

    # 3. a weakref finalizer that fires during the unflatten (last reference dropped there)
    holder = {}

    class Res:
        pass

    def arm():
        r = Res()
        weakref.finalize(r, build_bad)
        holder["r"] = r

    def drop():
        holder.pop("r", None)

    arm()
    HOOK["fn"] = drop
    RESULTS.clear()
    show("finalizer: tree.map", lambda: jax.tree.map(lambda v: v + 1, n).value.tolist(), count=False)
    out("finalizer saw", RESULTS)
    HOOK["fn"] = None

    # 4. the same, through a jitted call's output unflatten
    signal.signal(signal.SIGUSR1, lambda s, f: build_bad())
    step = common.jit(lambda q: jax.tree.map(lambda v: 2 * v, q))
    step(n)
    HOOK["fn"] = lambda: signal.raise_signal(signal.SIGUSR1)
    RESULTS.clear()
    show("signal: jit", lambda: step(n).value.tolist(), count=False)
    out("signal: jit handler saw", RESULTS)
    HOOK["fn"] = None


common.main(main)
