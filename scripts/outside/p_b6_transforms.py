# Family B6 (jax transforms): constructions inside pmap (8 CPU devices), shard_map, scan,
# while_loop, custom_vjp fwd/bwd, checkify, vmap, grad, AOT lower/compile/serialize (jax.export)
# must be checked at trace time as plain (bad ones raise), good ones give plain's values.
# Claim attacked: "same checks run at construction and trace time", same values.
# MODES: install wrap
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import common
from common import show, out, cbeartype
import jax, jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, jaxtyped
from jax.experimental import checkify
from flax import struct


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class S:
    x: Float[Array, "*b n"]


def bad(q):
    return S(q.x.astype(jnp.int32))  # a construction: must raise at trace time


def main():
    s = S(jnp.arange(8.0))
    ps = S(jnp.arange(16.0).reshape(8, 2))
    show("pmap good", lambda: jax.pmap(lambda q: S(q.x * 2))(ps))
    show("pmap bad", lambda: jax.pmap(bad)(ps))
    mesh = jax.make_mesh((8,), ("d",))
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    sm = lambda f: shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    from jax.sharding import NamedSharding
    s0, s = s, jax.device_put(s, NamedSharding(mesh, P("d")))
    show("shard_map good", lambda: common.jit(sm(lambda q: S(q.x + 1)))(s))
    show("shard_map bad", lambda: common.jit(sm(bad))(s))
    s = s0
    show("scan good", lambda: jax.lax.scan(lambda c, _: (S(c.x + 1), None), s, None, length=3)[0])
    show("scan bad", lambda: jax.lax.scan(lambda c, _: (bad(c), None), s, None, length=3)[0])
    show("while good", lambda: jax.lax.while_loop(lambda c: c.x[0] < 3, lambda c: S(c.x + 1), s))
    show("while bad", lambda: jax.lax.while_loop(lambda c: c.x[0] < 3, bad, s))

    @jax.custom_vjp
    def f(q):
        return S(q.x * 3)

    def fwd(q):
        return f(q), S(q.x)

    def bwd(res, g):
        return (S(g.x * res.x),)

    f.defvjp(fwd, bwd)
    show("custom_vjp grad", lambda: jax.grad(lambda q: f(q).x.sum())(s))

    @jax.custom_vjp
    def h(q):
        return q

    h.defvjp(lambda q: (q, None), lambda r, g: (S(g.x.astype(jnp.int32)),))
    show("custom_vjp bad bwd", lambda: jax.grad(lambda q: h(q).x.sum())(s))
    show("checkify", lambda: checkify.checkify(common.jit(lambda q: S(q.x / 2)))(s)[1])
    show("checkify bad", lambda: checkify.checkify(common.jit(bad))(s)[1])
    show("vmap good", lambda: jax.vmap(lambda q: S(q.x * 2))(ps))
    show("vmap bad", lambda: jax.vmap(bad)(ps))
    show("grad", lambda: jax.grad(lambda q: (q.x ** 2).sum())(s))
    j = common.jit(lambda q: S(q.x * 5))
    show("aot", lambda: j.lower(s).compile()(s))
    show("aot bad", lambda: common.jit(bad).lower(s))
    from jax import export
    E = {}
    show("export", lambda: E.setdefault("e", export.export(jax.jit(lambda q: S(q.x * 7)))(s)).out_tree)
    if "e" in E:
        show("export call", lambda: E["e"].call(s))
        show("export serialize (needs register_pytree_node_serialization, plain too)", lambda: len(E["e"].serialize()))
    show("export bad", lambda: export.export(jax.jit(bad))(s))


common.main(main)
