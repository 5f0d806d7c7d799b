# Family B5 (pickling after the first unflatten): guards are put on at the first unflatten.
# cloudpickle a __main__ class (by value), a function that builds it, an instance and a treedef
# AFTER the first unflatten; load them in a fresh PLAIN child (no install): constructions there
# must be checked as plain's, values identical, and the parent's pickles byte-for-byte loadable.
# (Classes use @beartype on the class: a @jaxtyped class does not cloudpickle by value, plain.)
# Also copy.deepcopy of the class's __init__ and pickle of the treedef in-process.
# Claim attacked: "pickles by reference, and by value with cloudpickle ... checks every construction".
# MODES: install
import common
from common import show, out
from beartype import beartype
import copy, pickle, subprocess, sys, os
import cloudpickle
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped
from flax import struct
import dataclasses


@beartype
@struct.dataclass
class S:
    x: Float[Array, " n"]


@jax.tree_util.register_pytree_node_class
@beartype
@dataclasses.dataclass
class N:
    x: Float[Array, " n"]

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


def builder(v):
    return S(v), N(v)


CHILD = r'''
import sys, pickle, cloudpickle, warnings
warnings.simplefilter("ignore")
import jax, jax.numpy as jnp
jax.config.update("jax_platforms", "cpu")
blob = pickle.load(sys.stdin.buffer)
(S, N, builder, inst) = cloudpickle.loads(blob)
def t(label, f):
    try:
        r = f()
        print(label, "OK", type(r).__name__ if not isinstance(r, (str, bool, list)) else r)
    except Exception as e:
        print(label, "EXC", type(e).__name__)
t("S bad", lambda: S("no"))
t("N bad", lambda: N("no"))
t("builder bad", lambda: builder("no"))
t("S good", lambda: S(jnp.ones(2)).x.tolist())
t("inst", lambda: inst[0].x.tolist())
t("inst replace bad", lambda: inst[0].replace(x="no"))
t("is pytree", lambda: str(jax.tree.structure(inst[1])))
t("S init sig", lambda: str(__import__("inspect").signature(S.__init__)))
'''


def main():
    s, n = builder(jnp.ones(2))
    jax.tree.map(lambda v: v + 1, s)  # first unflatten puts the guards on
    jax.tree.map(lambda v: v + 1, n)
    td = jax.tree.structure([s, n])
    blob = cloudpickle.dumps((S, N, builder, (s, n)))
    env = dict(os.environ)
    env.pop("TYPECHECK_GUARD", None)
    env["TG_MODE"] = "plain"
    p = subprocess.run([sys.executable, "-c", CHILD], input=pickle.dumps(blob), capture_output=True, env=env)
    for l in p.stdout.decode().splitlines():
        out("child", l)
    out("child rc", p.returncode)
    if p.returncode:
        out("child err", p.stderr.decode().strip().splitlines()[-1:])
    show("deepcopy init", lambda: copy.deepcopy(S.__init__) is S.__init__, count=False)
    show("treedef pickle", lambda: str(pickle.loads(pickle.dumps(jax.tree.structure(s)))), count=False)
    show("cloudpickle loads same proc bad", lambda: cloudpickle.loads(cloudpickle.dumps(S))("no"))
    show("cloudpickle loads same proc good", lambda: cloudpickle.loads(cloudpickle.dumps(S))(jnp.ones(2)))


common.main(main)
