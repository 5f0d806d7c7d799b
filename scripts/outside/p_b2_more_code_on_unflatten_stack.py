# Family A, more triggers (round-2 p_a1 has signal / pdb / weakref.finalize): code that runs on
# top of an unflatten's stack without being called by it -- a gc.callbacks callback, a
# sys.setprofile function, a __del__, an audit hook -- and, as a control, another thread that
# builds while the main thread is inside tree_unflatten.  Each builds Node(bad): plain, checked.
# Claim attacked: only the unflatten's own constructions skip their check.
# MODES: install
import common
from common import show, out
import dataclasses, gc, sys, threading
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped
from beartype import beartype

HOOK = {"fn": None}
RES = []


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class Node:
    value: Float[Array, " n"]
    unit: str

    def tree_flatten(self):
        return (self.value,), self.unit

    @classmethod
    def tree_unflatten(cls, unit, children):
        if HOOK["fn"] is not None:
            HOOK["fn"]()
        return cls(children[0], unit)


def build_bad():
    try:
        Node("not an array", "m")
        RES.append("built")
    except Exception as e:  # noqa: BLE001
        RES.append(type(e).__name__)


def run(label, fn):
    n = Node(jnp.ones(2), "m")
    RES.clear()
    HOOK["fn"] = fn
    try:
        show(label, lambda: jax.tree.map(lambda v: v + 1, n).value.tolist(), count=False)
    finally:
        HOOK["fn"] = None
    out(label + " saw", sorted(set(RES)))


def main():
    jax.tree.map(lambda v: v, Node(jnp.ones(2), "m"))

    # gc callback
    armed = {"on": False}

    def cb(phase, info):
        if armed["on"] and phase == "start":
            armed["on"] = False
            build_bad()

    gc.callbacks.append(cb)

    def trig_gc():
        armed["on"] = True
        gc.collect()

    run("gc.callbacks", trig_gc)
    gc.callbacks.remove(cb)

    # __del__
    class Res:
        def __del__(self):
            build_bad()

    box = {"r": Res()}
    run("__del__", lambda: box.pop("r", None))

    # sys.setprofile: fire once on the first 'call' event inside the unflatten
    state = {"n": 0}

    def prof(frame, event, arg):
        if event == "call" and state["n"] == 0:
            state["n"] = 1
            sys.setprofile(None)
            build_bad()

    def trig_prof():
        sys.setprofile(prof)
        len([])  # a C call; then the next python call event fires
        (lambda: None)()

    run("setprofile", trig_prof)
    sys.setprofile(None)

    # audit hook (cannot be removed: guarded by a flag)
    aud = {"on": False}

    def audit(event, args):
        if aud["on"] and event == "os.listdir":
            aud["on"] = False
            build_bad()

    sys.addaudithook(audit)

    def trig_audit():
        import os
        aud["on"] = True
        os.listdir(".")

    run("audit hook", trig_audit)

    # control: another thread builds while main is inside tree_unflatten
    def trig_thread():
        t = threading.Thread(target=build_bad)
        t.start()
        t.join()

    run("thread", trig_thread)


common.main(main)
