# Family B11 (processes): under `typecheck-guard run` / TYPECHECK_GUARD=install, spawn workers
# install() too.  A worker that builds objects (good and bad) of a class defined in an importable
# module, and a subprocess Python started with env={} (no variable): constructions checked as plain,
# values equal.  Claim attacked: "every program behaves exactly as without it" across processes.
# MODES: run env
import common
from common import out
import multiprocessing as mp, subprocess, sys, os
from concurrent.futures import ProcessPoolExecutor


def work(kind):
    import b11mod
    return b11mod.job(kind)


def main():
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as ex:
        for k in ("good", "bad", "replace_bad", "jit", "installed"):
            out("worker " + k, ex.submit(work, k).result())
    p = subprocess.run([sys.executable, "-c", "import b11mod; print(b11mod.job('bad'), b11mod.job('installed'))"],
                       capture_output=True, text=True, env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.path.dirname(os.path.abspath(__file__)), "JAX_PLATFORMS": "cpu"})
    out("subprocess env={}", p.stdout.strip() or p.stderr.strip().splitlines()[-1:])


if __name__ == "__main__":
    common.main(main)
