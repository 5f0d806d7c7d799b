# Region: the runtime guard (runtime_checks("log")) watches jitted calls with sys.setprofile
# (3.11) / sys.monitoring (3.12+): a program's own profile / trace functions and monitoring
# tool ids must see what they see without it.
# MODES: guard
import common
from common import show
import sys, threading, jax, jax.numpy as jnp
from flax import struct
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]


def main():
    f = jax.jit(lambda s: s.replace(x=s.x + 1))
    s = S(jnp.ones(2))
    f(s)
    events = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "marker":
            events.append("marker")

    def marker():
        return 1

    sys.setprofile(prof)
    r = f(s)
    marker()
    r = f(r)
    cur = sys.getprofile()
    sys.setprofile(None)
    show("profile kept", lambda: cur is prof, count=False)
    show("profile saw marker", lambda: events, count=False)
    show("getprofile after", lambda: sys.getprofile(), count=False)
    f(s)
    show("getprofile after plain call", lambda: sys.getprofile(), count=False)
    show("gettrace after call", lambda: sys.gettrace(), count=False)
    tev = []

    def tr(frame, event, arg):
        if frame.f_code.co_name == "marker":
            tev.append(event)
        return tr

    sys.settrace(tr)
    f(s)
    marker()
    sys.settrace(None)
    show("trace saw marker", lambda: tev, count=False)
    if hasattr(sys, "monitoring"):
        m = sys.monitoring
        res = []
        for tid in (3, 4, 5):
            try:
                m.use_tool_id(tid, "mine")
                res.append((tid, "ok"))
            except ValueError as e:
                res.append((tid, "taken"))
        f(s)
        show("tool ids", lambda: res, count=False)
        show("tool names", lambda: [m.get_tool(i) for i in range(6)], count=False)
        for tid, st in res:
            if st == "ok":
                m.free_tool_id(tid)
    else:
        show("tool ids", lambda: "n/a", count=False)
    # thread profile
    th_prof = []
    threading.setprofile(lambda fr, ev, a: th_prof.append(1) if ev == "call" and fr.f_code.co_name == "marker" else None)
    t = threading.Thread(target=lambda: (f(s), marker()))
    t.start(); t.join()
    threading.setprofile(None)
    show("thread profile saw marker", lambda: len(th_prof), count=False)

common.main(main)
