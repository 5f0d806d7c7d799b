# New: attributes of unflatten_safe(jax.jit(f)) that the proxy answers differently from the
# jitted function (__wrapped__, _cache_size, cloudpickle).
# MODES: wrap
import common
from common import show
import pickle, cloudpickle, jax, jax.numpy as jnp


def f(x):
    return x + 1


def main():
    j = common.jit(f)
    show("call", lambda: j(jnp.ones(1)).tolist(), count=False)
    show("__wrapped__ is f", lambda: j.__wrapped__ is f, count=False)
    show("_cache_size", lambda: j._cache_size(), count=False)
    show("cloudpickle", lambda: pickle.loads(cloudpickle.dumps(j))(jnp.ones(1)).tolist(), count=False)
    show("pickle", lambda: pickle.loads(pickle.dumps(j))(jnp.ones(1)).tolist(), count=False)

common.main(main)
