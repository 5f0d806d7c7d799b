"""One process of a two-process JAX program (the multi-controller runtime), run by
`test_multiprocess.py`: two of these on this machine, each with 2 CPU devices, make
one 4-device global mesh.

    python tests/multiprocess_step.py PROCESS_ID PORT plain|install OUT.json

The state is that of jaxtyping's issue #213 (as in `device_step.py`: a nested,
typechecked `flax.struct` dataclass with a `PyTree[Float[Array, "..."]]` field and
metadata fields), sharded over the global mesh, built from each process's own rows
with `jax.make_array_from_process_local_data`, donated to a jitted step whose
gradient is all-reduced across both processes (over gloo).

- `plain`: the classes are JAX's own registration; the step runs as is ("plain"),
  then through `typecheck_guard.unflatten_safe(step)` ("guarded-call").
- `install`: `typecheck_guard.install()` first, then the classes ("install"), and
  `unflatten_safe` on top of it ("install+guarded-call").

Each run is made once per checker. Writes one JSON object to OUT.json (gloo prints
to stdout): per run, the checks counted on each cache-hit step, a digest of the whole
final state (gathered from both processes), its shardings, and whether a bad
construction raised.
"""

import faulthandler
import hashlib
import json
import os
import sys

import jax

PROCESSES = 2
LOCAL_DEVICES = 2
STEPS = 5  # cache-hit steps counted per run
# Where a process still runs after this, it prints every thread's stack and exits
# (before the parent's deadline, which kills it silently).
WATCHDOG = 100.0


def start(process_id: int, port: int) -> None:
    if "jax_num_cpu_devices" in getattr(jax.config, "values", {}):
        jax.config.update("jax_num_cpu_devices", LOCAL_DEVICES)
    # else: the parent set XLA_FLAGS=--xla_force_host_platform_device_count=2.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}",
        num_processes=PROCESSES,
        process_id=process_id,
        initialization_timeout=60,
    )


def main() -> None:
    process_id, port, mode, path = int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:]
    if mode not in ("plain", "install"):
        sys.exit(f"unknown mode {mode!r}: plain or install")
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    start(process_id, port)

    if mode == "install":
        import typecheck_guard

        typecheck_guard.install()  # before the classes are defined

    import numpy as np
    from device_step import checker, loss, update
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    assert jax.process_count() == PROCESSES, jax.process_count()
    assert jax.device_count() == PROCESSES * LOCAL_DEVICES, jax.devices()
    assert jax.local_device_count() == LOCAL_DEVICES, jax.local_devices()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    d, h, n = 8, 3, 16  # w: (d, h) sharded by rows; the batch: (n, d) by rows

    def local(sharding, global_value):
        # This process's part of `global_value`: its rows under `rows`, all of it
        # when replicated.
        global_value = np.asarray(global_value)
        if sharding is replicated:
            part = global_value
        else:
            size = global_value.shape[0] // PROCESSES
            part = global_value[process_id * size : (process_id + 1) * size]
        return jax.make_array_from_process_local_data(
            sharding, part, global_value.shape
        )

    def initial(Params, State):
        w = np.random.default_rng(0).normal(size=(d, h)).astype(np.float32)
        params = Params(local(rows, w), local(replicated, np.zeros(h, np.float32)))
        momentum = Params(
            local(rows, np.zeros((d, h), np.float32)),
            local(replicated, np.zeros(h, np.float32)),
        )
        return State(params, momentum, local(replicated, np.zeros((), np.int32)))

    def batch(i):
        x = np.arange(n * d, dtype=np.float32).reshape(n, d) / (50.0 + i)
        y = np.linspace(-1.0, 1.0, n, dtype=np.float32) * (i % 3)
        return local(rows, x), local(rows, y)

    def make_step():
        # A function of its own for each run. jax 0.10's jit caches compare treedefs
        # with `==`, which is True for two registered dataclasses with the same
        # fields (the beartype run's `State` and the typeguard run's), while their
        # hashes differ: with one `step` for both runs, a call sometimes got the
        # trace of the other run's classes and returned instances of them, whose
        # checks the other checker counted (0 checks per step here, once in ~20
        # runs, without any plugin).
        def step(state, x, y):
            # The gradient of the sharded batch and rows: XLA all-reduces it across
            # the two processes.
            return update(state, jax.grad(loss)(state.params, x, y))

        return step

    def describe(state):
        leaves = jax.tree.leaves(state)
        gathered = multihost_utils.process_allgather(leaves, tiled=True)
        digest = hashlib.sha256()
        for a in gathered:
            a = np.asarray(a)
            digest.update(str((a.dtype, a.shape)).encode())
            digest.update(a.tobytes())
        return {
            "digest": digest.hexdigest(),
            "shardings": [
                (type(leaf.sharding).__name__, str(leaf.sharding.spec), leaf.shape)
                for leaf in leaves
            ],
            "addressable": sorted(
                str(s.index) for leaf in leaves for s in leaf.addressable_shards
            ),
            "step": int(np.asarray(gathered[-1])),
            "type": type(state).__name__,
            "params_type": type(state.params).__name__,
        }

    def run(Params, State, typecheck, guarded):
        jitted = jax.jit(make_step(), donate_argnums=0)
        if guarded:
            import typecheck_guard

            jitted = typecheck_guard.unflatten_safe(jitted)
        state = initial(Params, State)
        expected = [leaf.sharding for leaf in jax.tree.leaves(state)]
        for i in range(2):  # the trace, and the first cache hit
            state = jitted(state, *batch(i))
        checks, donated = [], True
        for i in range(2, 2 + STEPS):
            inputs = batch(i)
            before = jax.tree.leaves(state)
            typecheck.calls = 0
            state = jitted(state, *inputs)
            checks.append(typecheck.calls)
            # What this run jitted returns its own classes (see `make_step`).
            assert type(state) is State and type(state.params) is Params, type(state)
            donated = donated and all(leaf.is_deleted() for leaf in before)
        state = jax.block_until_ready(state)
        out = describe(state)
        out["checks"] = checks
        out["donated"] = donated
        out["shardings_preserved"] = all(
            leaf.sharding.is_equivalent_to(e, leaf.ndim)
            for leaf, e in zip(jax.tree.leaves(state), expected, strict=True)
        )
        # A wrong construction is still checked (the bias has the wrong length).
        typecheck.calls = 0
        try:
            Params(state.params.w, jax.numpy.zeros(h + 1))
        except Exception as e:  # the checker's own error
            out["bad_construction"] = type(e).__name__
        else:
            out["bad_construction"] = None
        out["bad_construction_checks"] = typecheck.calls
        return out

    out: dict = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
    }
    for name in ("beartype", "typeguard"):
        typecheck = checker(name)
        # The seed state of the 8-device test, defined here after `install()` when
        # the run installs.
        from device_step import make_classes

        classes = make_classes(typecheck)
        if mode == "install":
            import typecheck_guard

            assert typecheck_guard._adapt._register.adapted_how(classes[1]) is not None
            out[f"{name}/install"] = run(*classes, typecheck, guarded=False)
            out[f"{name}/install+guarded-call"] = run(*classes, typecheck, guarded=True)
        else:
            out[f"{name}/plain"] = run(*classes, typecheck, guarded=False)
            out[f"{name}/guarded-call"] = run(*classes, typecheck, guarded=True)
    # Both processes are done with their collectives before either leaves.
    multihost_utils.sync_global_devices("done")
    with open(path, "w") as f:
        json.dump(out, f)
    jax.distributed.shutdown()
    # About one run in ten, the coordinator process (0) hung in the interpreter's
    # finalization after this point, with no Python frame left (jax 0.10.2, gloo;
    # the teardown of jaxlib's collectives is known to be fragile:
    # https://github.com/jax-ml/jax/issues/19704). Everything is done and written:
    # we leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
