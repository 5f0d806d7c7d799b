"""The parent program of `test_children.py`: one child per entry of a plan, each sent
an instance and treedefs (`children_work.work`), each sending its own back.

    python children_program.py OUT.json PLAN

`PLAN` is comma-separated `mechanism:mode` entries:

- mechanisms: `spawn`, `forkserver`, `fork` (a `multiprocessing.Pool` of one worker
  in that start method), `executor` (a `ProcessPoolExecutor` of spawned workers,
  the start method JAX recommends), `subprocess` (`python children_work.py`, the
  payload pickled through its stdin and stdout);
- modes: `inherit` (the parent's environment), `plain` (without
  `TYPECHECK_GUARD`), `install` (with `TYPECHECK_GUARD=install`), `no-package`
  (without it, and typecheck_guard can't be imported; `subprocess` only). A fork
  child is a copy of its parent whatever its mode.

Writes one JSON object: this process's own report (`self`) and, per entry, the
child's report, what this process rebuilt from what the child sent back, or the
error (a child that crashed, a pool that broke, a result that did not come before
the deadline: then the children are killed, and the program still ends; should it
not, it prints its stacks and exits after `WATCHDOG` seconds).

Every pool is started before this process builds an array: forking a process whose
JAX runtime has started is unsafe (JAX warns so), and a fork child is forked here.
"""

import faulthandler
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor

import children_work

VARIABLE = "TYPECHECK_GUARD"
# Seconds for every child to answer, from when the pools start. A child that
# crashes leaves a `Pool` waiting forever: the deadline turns that into an error.
DEADLINE = 150.0
# Where this process still runs after this, it prints its stacks and exits.
WATCHDOG = 240.0
POOLS = ("spawn", "forkserver", "fork")


def _environment(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    if mode in ("plain", "no-package"):
        env.pop(VARIABLE, None)
    elif mode == "install":
        env[VARIABLE] = "install"
    return env


class _Environ:
    """`os.environ` as `mode` wants it, for the children started meanwhile."""

    def __init__(self, mode: str):
        self.mode = mode

    def __enter__(self) -> None:
        self.saved = dict(os.environ)
        wanted = _environment(self.mode)
        os.environ.clear()
        os.environ.update(wanted)

    def __exit__(self, *exc) -> None:
        os.environ.clear()
        os.environ.update(self.saved)


def _subprocess(mode: str, args: tuple, timeout: float) -> tuple:
    here = os.path.dirname(os.path.abspath(children_work.__file__))
    env = _environment(mode)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    command = [sys.executable, os.path.join(here, "children_work.py")]
    if mode == "no-package":
        # typecheck_guard is installed, but this child can't import it.
        command = [
            sys.executable,
            "-c",
            "import sys; sys.modules['typecheck_guard'] = None; "
            "import children_work; children_work.main()",
        ]
    out = subprocess.run(
        command, input=pickle.dumps(args), capture_output=True, env=env, timeout=timeout
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"exit code {out.returncode}: {out.stderr.decode(errors='replace')[-3000:]}"
        )
    return pickle.loads(out.stdout)


def run(out_path: str, plan: list[tuple[str, str]]) -> dict:
    """Run `plan`; write and return the results."""
    start = time.monotonic()
    pools, executors = {}, {}
    for entry in plan:
        mechanism, mode = entry
        if mechanism in POOLS:
            with _Environ(mode):
                pools[entry] = multiprocessing.get_context(mechanism).Pool(1)
    state = children_work.make(2.0, "p")
    args = children_work.payload(state, children_work.Defaults(7, 8))
    pending = {}
    for entry in plan:
        mechanism, mode = entry
        if mechanism in POOLS:
            pending[entry] = pools[entry].apply_async(children_work.work, args)
        elif mechanism == "executor":
            with _Environ(mode):
                # Its workers start with the first task.
                executors[entry] = ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn")
                )
                pending[entry] = executors[entry].submit(children_work.work, *args)
    # This process too: what it is, and what it makes of its own payload.
    results: dict = {"self": {**children_work._about_this_process()}}
    results["self"]["received"] = children_work.unpack(*args)
    results["self"].update(children_work.coverage())
    children = results["children"] = {}
    for entry in plan:
        mechanism, mode = entry
        left = max(1.0, DEADLINE - (time.monotonic() - start))
        key = f"{mechanism}:{mode}"
        try:
            if mechanism == "subprocess":
                answer = _subprocess(mode, args, left)
            elif mechanism == "executor":
                answer = pending[entry].result(timeout=left)
            else:
                answer = pending[entry].get(timeout=left)
            report, *back = answer
            children[key] = {"child": report, "back": children_work.unpack(*back)}
        except BaseException as e:  # what the test reports: crash, hang, error
            children[key] = {
                "error": f"{type(e).__name__}: {e}"[:3000] or type(e).__name__,
                "traceback": traceback.format_exc()[-3000:],
            }
    with open(out_path, "w") as f:
        json.dump(results, f)
    for pool in pools.values():
        pool.terminate()
        pool.join()
    for process in multiprocessing.active_children():
        process.kill()  # an executor's worker that did not answer
    for executor in executors.values():
        executor.shutdown(cancel_futures=True)
    return results


def parse(plan: str) -> list[tuple[str, str]]:
    return [tuple(entry.split(":")) for entry in plan.split(",")]  # type: ignore[misc]


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    run(sys.argv[1], parse(sys.argv[2]))
