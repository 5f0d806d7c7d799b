# Row-1 evidence: a helper that tree_unflatten NAMES (so its frames count as "the unflatten's own
# code") is ALSO installed as a signal handler / gc callback / weakref callback / __del__ /
# profile function / audit hook.  Those run on top of the unflatten without being called by it;
# docs: "Code that runs on top of an unflatten without being called by it ... their
# constructions are checked".  The helper builds Node(SOURCE) with a bad SOURCE.
# Plain: TypeCheckError in every case.  Controls: an unnamed handler with the same body.
# MODES: install
import common
from common import show, out, cbeartype
import dataclasses, gc, os, signal, sys, weakref, time
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped

SOURCE = {"value": "not an array"}
TRIG = {"kind": None}
ARMED = {"on": False}
RES = []
KEEP = {}


def snapshot(*_):
    """Named by Node.tree_unflatten (autosave branch) AND used as a callback below."""
    if not ARMED["on"]:
        return None
    ARMED["on"] = False
    try:
        Node(SOURCE["value"], "snap")
        RES.append("built")
    except Exception as e:  # noqa: BLE001
        RES.append(type(e).__name__)


def unnamed_snapshot(*_):  # control: same body, not named by the unflatten
    if not ARMED["on"]:
        return None
    ARMED["on"] = False
    try:
        Node(SOURCE["value"], "snap")
        RES.append("built")
    except Exception as e:  # noqa: BLE001
        RES.append(type(e).__name__)


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class Node:
    value: Float[Array, " n"]
    unit: str

    def tree_flatten(self):
        return (self.value,), self.unit

    @classmethod
    def _snap(cls, *_):  # named through the class's attributes (cls._snap)
        snapshot()

    @classmethod
    def tree_unflatten(cls, unit, children):
        k = TRIG["kind"]
        if k == "autosave":
            snapshot()
        elif k == "autosave-attr":
            cls._snap()
        elif k in ("signal", "signal-attr", "signal-unnamed"):
            signal.raise_signal(signal.SIGUSR1)
        elif k == "sleep":  # a signal from another thread arrives during a sleep
            time.sleep(0.3)
        elif k in ("gc", "gc-nested"):
            gc.collect()
        elif k == "gc-auto":  # only allocations here; gc threshold 1 triggers collections
            junk = [[i] for i in range(50)]
            del junk
        elif k in ("weakref", "del"):
            KEEP.pop("obj", None)
        elif k == "profile":
            sys.setprofile(snapshot)
            len(())
            sys.setprofile(None)
        elif k == "audit":
            compile("1", "<tg>", "eval")
        elif k == "busy":
            s = 0
            for i in range(20000):
                s += i
        if k == "gc-nested" and not KEEP.get("nested_installed"):
            pass
        return cls(children[0], unit)


jax.tree_util.register_pytree_node_class(Node)


def run(label, kind, setup=None):
    n = Node(jnp.ones(2), "m")
    RES.clear()
    if setup:
        setup()
    ARMED["on"] = True
    TRIG["kind"] = kind
    try:
        show(label, lambda: jax.tree.map(lambda v: v + 1, n).value.tolist(), count=False)
    finally:
        TRIG["kind"] = None
        ARMED["on"] = False
    out(label + " saw", sorted(set(RES)))


class Handle:
    __del__ = snapshot  # the named helper as a finalizer method


def main():
    jax.tree.map(lambda v: v, Node(jnp.ones(2), "m"))  # first unflatten

    signal.signal(signal.SIGUSR1, snapshot)
    run("signal handler = named helper", "signal")
    signal.signal(signal.SIGUSR1, Node._snap)
    run("signal handler = cls._snap (class attr)", "signal-attr")
    signal.signal(signal.SIGUSR1, unnamed_snapshot)
    run("control: unnamed signal handler", "signal-unnamed")

    # a signal sent by another thread while the unflatten sleeps
    import threading
    signal.signal(signal.SIGUSR1, snapshot)
    main_id = threading.get_ident()

    def sender():
        time.sleep(0.1)
        signal.pthread_kill(main_id, signal.SIGUSR1)

    run("thread-sent signal during unflatten sleep", "sleep", setup=lambda: threading.Thread(target=sender).start())
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)

    gc.callbacks.append(snapshot)
    run("gc.callbacks = named helper (gc.collect)", "gc")
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        run("gc.callbacks = named helper (automatic gc)", "gc-auto")
    finally:
        gc.set_threshold(*old)
    gc.callbacks.remove(snapshot)

    class Obj:
        pass

    def mk_weak():
        o = Obj()
        KEEP["obj"] = o
        KEEP["ref"] = weakref.ref(o, snapshot)

    run("weakref callback = named helper", "weakref", setup=mk_weak)
    KEEP.pop("ref", None)

    run("__del__ = named helper", "del", setup=lambda: KEEP.__setitem__("obj", Handle()))

    run("setprofile = named helper", "profile")

    sys.addaudithook(snapshot)  # cannot be removed; ARMED gates it
    run("audit hook = named helper", "audit")

    # realistic: an interval timer whose handler is the named helper, while unflattens run
    signal.signal(signal.SIGALRM, snapshot)
    RES.clear()
    n = Node(jnp.ones(2), "m")
    TRIG["kind"] = "busy"
    signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
    try:
        for _ in range(60):
            ARMED["on"] = True
            jax.tree.map(lambda v: v + 1, n)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        TRIG["kind"] = None
        ARMED["on"] = False
    out("interval timer handler = named helper saw", sorted(set(RES)))


common.main(main)
