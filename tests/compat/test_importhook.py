"""The post-import hook: libraries imported after a patch was switched on are
patched right after their code runs, and the hook is gone once the patch is undone."""

import subprocess
import sys


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_runtime_guard_patches_equinox_and_nnx_imported_later():
    code = (
        "import sys, typecheck_guard\n"
        "with typecheck_guard.runtime_checks('disallow'):\n"
        "    assert 'equinox' not in sys.modules and 'flax' not in sys.modules\n"
        "    import equinox, flax.nnx\n"
        "    print(hasattr(equinox.filter_jit, '__typecheck_guard_original__'),\n"
        "          hasattr(flax.nnx.jit, '__typecheck_guard_original__'))\n"
    )
    # (runtime_checks keeps the factories patched for the rest of the process, so
    # that functions jitted before a thread raises its level are watched too.)
    assert _run(code) == ["True", "True"]


def test_install_hook_is_removed_by_uninstall():
    code = (
        "import sys, typecheck_guard\n"
        "typecheck_guard.install()\n"
        "hooked = any(type(f).__module__ == 'typecheck_guard._compat._importhook' for f in sys.meta_path)\n"
        "typecheck_guard.uninstall()\n"
        "left = any(type(f).__module__ == 'typecheck_guard._compat._importhook' for f in sys.meta_path)\n"
        "print(hooked, left)\n"
    )
    assert _run(code) == ["True", "False"]
