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


# --- the hook itself, on modules of our own ------------------------------------------

import contextlib  # noqa: E402
import importlib  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402

from typecheck_guard._compat import _importhook  # noqa: E402


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A folder on `sys.path` for modules the test writes; they are forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(name: str, source: str = "") -> str:
        (tmp_path / f"{name}.py").write_text(source)
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def _waits(name: str) -> bool:
    # (The finder itself stays while anything else waits: this session's runtime
    # guard waits for equinox and flax.nnx.)
    return name in _importhook._waiting and _importhook._FINDER in sys.meta_path


def test_at_once_when_imported_after_the_import_when_not(modules):
    modules("tg_hook_now", "X = 1\n")
    modules("tg_hook_later", "X = 2\n")
    importlib.import_module("tg_hook_now")

    seen = []
    with contextlib.ExitStack() as stack:
        _importhook.after_import(
            ["tg_hook_now", "tg_hook_later"],
            lambda m: seen.append((m.__name__, m.X)),
            stack,
        )
        assert seen == [("tg_hook_now", 1)] and _waits("tg_hook_later")
        importlib.import_module("tg_hook_later")

        # Right after its code ran, before the import returned; then nothing waits.
        assert seen == [("tg_hook_now", 1), ("tg_hook_later", 2)]
        assert not _waits("tg_hook_later")
        # The module's loader and spec are its finder's, untouched.
        loader = sys.modules["tg_hook_later"].__loader__
        assert type(loader).__name__ == "SourceFileLoader"
        assert "exec_module" not in vars(loader)


def test_all_of_several_modules_whichever_comes_last(modules):
    modules("tg_hook_a")
    modules("tg_hook_b")
    calls = []
    with contextlib.ExitStack() as stack:
        _importhook.after_all_imported(
            ["tg_hook_a", "tg_hook_b"], lambda: calls.append(1), stack
        )
        importlib.import_module("tg_hook_b")

        assert calls == []
        importlib.import_module("tg_hook_a")

        assert calls == [1]


def test_closing_the_stack_drops_what_waits(modules):
    modules("tg_hook_dropped")
    calls = []
    with contextlib.ExitStack() as stack:
        _importhook.after_import(["tg_hook_dropped"], calls.append, stack)
        assert _waits("tg_hook_dropped")
    assert "tg_hook_dropped" not in _importhook._waiting
    importlib.import_module("tg_hook_dropped")

    assert calls == []


def test_a_module_imported_in_another_thread_runs_the_call_there_once(modules):
    modules("tg_hook_thread", "import threading\nTHREAD = threading.get_ident()\n")
    seen = []
    with contextlib.ExitStack() as stack:
        _importhook.after_import(
            ["tg_hook_thread"], lambda m: seen.append(threading.get_ident()), stack
        )
        threads = [
            threading.Thread(target=importlib.import_module, args=("tg_hook_thread",))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert seen == [sys.modules["tg_hook_thread"].THREAD]


def test_settle_waits_for_a_module_another_thread_was_importing(modules):
    # The other thread found the module before anything watched it: our finder never
    # sees it, and `settle()` waits for that import, then runs what waits.
    started, go = threading.Event(), threading.Event()
    import builtins

    builtins._tg_hook_events = (started, go)  # type: ignore[attr-defined]
    try:
        modules(
            "tg_hook_slow",
            "import builtins\n"
            "started, go = builtins._tg_hook_events\n"
            "started.set()\n"
            "go.wait(60)\n"
            "DONE = True\n",
        )
        t = threading.Thread(target=importlib.import_module, args=("tg_hook_slow",))
        t.start()
        assert started.wait(60)
        seen = []
        with contextlib.ExitStack() as stack:
            _importhook.after_import(
                ["tg_hook_slow"], lambda m: seen.append(m.DONE), stack
            )
            assert seen == []  # being executed: not imported yet
            go.set()
            _importhook.settle()
            assert seen == [True]
        t.join()
    finally:
        del builtins._tg_hook_events  # type: ignore[attr-defined]
