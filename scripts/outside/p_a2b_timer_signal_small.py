# p_a2 scaled down (15 handler runs, 50 ms timer): p_a2 plain exceeded its own 60 s faulthandler limit here.
# Family A (stack evidence), realistic form: a training loop with a periodic SIGALRM handler
# (a preemption / checkpoint handler) that builds a state object.  Python runs the handler on
# top of whatever frame the main thread is in -- sometimes a custom node's tree_unflatten
# during JAX's rebuild of a jitted call's output.  Plain: every handler construction of a bad
# object raises.  With the plugin: some are built unchecked.
# MODES: install
import common
from common import out
import dataclasses, signal
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped
from beartype import beartype


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class Node:
    value: Float[Array, "n"]
    unit: str

    def tree_flatten(self):
        return (self.value,), self.unit

    @classmethod
    def tree_unflatten(cls, unit, children):
        unit = "".join(ch for ch in unit * 2000)[: len(unit)]  # some work on the aux data
        return cls(children[0], unit)


SEEN = {"raised": 0, "built": 0}


def on_alarm(signum, frame):
    try:
        Node("not an array", "m")  # e.g. the checkpoint handler builds a (here: bad) state
        SEEN["built"] += 1
    except Exception:  # noqa: BLE001
        SEEN["raised"] += 1


def main():
    import faulthandler, sys
    faulthandler.dump_traceback_later(300, exit=True, file=sys.stderr)
    signal.signal(signal.SIGALRM, on_alarm)
    step = common.jit(lambda q: jax.tree.map(lambda v: v * 1.0, q))
    n = Node(jnp.ones(2), "m")
    step(n)
    signal.setitimer(signal.ITIMER_REAL, 0.003, 0.05)
    for _ in range(3000):
        n = step(n)
        if SEEN["raised"] + SEEN["built"] >= 15:
            break
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    out("handler constructions that skipped their check", SEEN["built"] > 0)


common.main(main)
