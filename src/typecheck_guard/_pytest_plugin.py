"""The pytest plugin: flag typechecks that run while a jitted function is called,
outside tracing (they run again on every step of a training loop).

- `--typecheck-guard=off|warn|strict`, or `typecheck_guard = ...` in the ini file
  (`[tool.pytest.ini_options]`); `off` by default, and then the plugin imports
  nothing and patches nothing.
- `strict`: the jitted call raises `typecheck_guard.RuntimeTypecheckError` (and a
  test that swallowed it still fails); `warn`: one `RuntimeTypecheckWarning` (a
  `pytest.PytestWarning`) per site and test.
- `@pytest.mark.allow_runtime_typechecks` exempts a test (its checks are still
  counted in the summary, marked "allowed").
- An end-of-session summary: each site, how many checks, how long they took.
- `--typecheck-guard-install`, or `typecheck_guard_install = true` in the ini file:
  `typecheck_guard.install()` before conftest files and test modules are imported
  (independent of the mode; undone in `pytest_unconfigure`).

The guard is switched on in `pytest_load_initial_conftests`, before conftest files
and test modules are imported, so that `@jax.jit` at module level is covered. The
guard's patches are released in `pytest_unconfigure`; sessions nested in one
process (pytester's `runpytest`) each record their own checks.
"""

from __future__ import annotations

import warnings
from typing import Any, Final

import pytest

from . import _runtime
from ._runtime import Site, Tally

# `--typecheck-guard-profile` is its own plugin module, loaded with this one.
pytest_plugins = ["typecheck_guard._profile_pytest"]

MODES: Final = ("off", "warn", "strict")
MARKER: Final = "allow_runtime_typechecks"

BAD_INI: Final = (
    "typecheck_guard = {value!r} in {inifile}: the plugin's modes are 'off' (the "
    "default), 'warn' and 'strict'. Write, for example, `typecheck_guard = \"strict\"` "
    "under [tool.pytest.ini_options], or pass --typecheck-guard=strict."
)

BAD_INSTALL_INI: Final = (
    "typecheck_guard_install in {inifile}: {error}. The option is a boolean: write "
    "`typecheck_guard_install = true` (or false) under [tool.pytest.ini_options], or "
    "pass --typecheck-guard-install."
)


class RuntimeTypecheckWarning(pytest.PytestWarning):
    """`--typecheck-guard=warn`: a typecheck ran while a jitted function was called,
    outside tracing."""


class _Stats:
    __slots__ = ("count", "seconds", "allowed", "tests")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.allowed = True
        self.tests: set[str] = set()


class _Recorder:
    """One session's sink: what each test ran, and the session's totals."""

    def __init__(self, mode: str):
        self.mode = mode
        self.item: pytest.Item | None = None
        self.allowed = False
        self.pending: Tally = {}
        self.sites: dict[Site, _Stats] = {}

    def __call__(self, tally: Tally) -> bool:
        for site, (count, seconds) in tally.items():
            stats = self.sites.get(site)
            if stats is None:
                stats = self.sites[site] = _Stats()
            stats.count += count
            stats.seconds += seconds
            stats.allowed = stats.allowed and self.allowed
            stats.tests.add(
                self.item.nodeid if self.item is not None else "<collection>"
            )
            if not self.allowed:
                entry = self.pending.setdefault(site, [0, 0.0])
                entry[0] += count
                entry[1] += seconds
        if self.item is None:
            # Outside a test (a module-level call while collecting): nothing to fail.
            warnings.warn(
                RuntimeTypecheckWarning(
                    _runtime.message(tally, "while collecting, outside any test")
                ),
                stacklevel=2,
            )
            self.pending = {}
            return False
        return self.mode == "strict" and not self.allowed


_RECORDER = pytest.StashKey[_Recorder]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("typecheck-guard")
    group.addoption(
        "--typecheck-guard",
        dest="typecheck_guard",
        choices=MODES,
        default=None,
        metavar="{off,warn,strict}",
        help="flag typechecks that run while a jitted function is called, outside "
        "tracing: 'warn' warns, 'strict' fails the test (default: the "
        "'typecheck_guard' ini value, else 'off').",
    )
    parser.addini(
        "typecheck_guard",
        help="default for --typecheck-guard: off, warn or strict.",
        default="off",
    )
    group.addoption(
        "--typecheck-guard-install",
        dest="typecheck_guard_install",
        action="store_true",
        default=None,
        help="call typecheck_guard.install() before conftest files and test modules "
        "are imported, so that the classes they define unflatten without re-running "
        "their typechecks (default: the 'typecheck_guard_install' ini value).",
    )
    parser.addini(
        "typecheck_guard_install",
        type="bool",
        help="default for --typecheck-guard-install: true or false.",
        default=False,
    )


def _mode(config: pytest.Config) -> str:
    value = getattr(config.known_args_namespace, "typecheck_guard", None)
    if value is None:
        value = config.getoption("typecheck_guard", None)
    if value is None:
        value = str(config.getini("typecheck_guard")).strip().strip("'\"") or "off"
        if value not in MODES:
            raise pytest.UsageError(
                BAD_INI.format(value=value, inifile=config.inipath or "the ini file")
            )
    return value


def _wants_install(config: pytest.Config) -> bool:
    value = getattr(config.known_args_namespace, "typecheck_guard_install", None)
    if value is None:
        value = config.getoption("typecheck_guard_install", None)
    if value is None:
        try:
            value = config.getini("typecheck_guard_install")
        # pytest < 9 raises the ValueError of its boolean parser, 9 a UsageError
        # with its text: neither names the option.
        except (ValueError, pytest.UsageError) as e:
            raise pytest.UsageError(
                BAD_INSTALL_INI.format(
                    error=e, inifile=config.inipath or "the ini file"
                )
            ) from None
    return bool(value)


# Whether this session's `--typecheck-guard-install` called `install()` and must
# undo it: not when `install()` was in effect already (an enclosing pytester
# session, a plugin that called it).
_INSTALLED = pytest.StashKey[bool]()


def _install(config: pytest.Config) -> None:
    if _INSTALLED in config.stash or not _wants_install(config):
        return
    from ._install import install, installed

    config.stash[_INSTALLED] = not installed()
    install()


def _start(config: pytest.Config) -> None:
    if _RECORDER in config.stash:
        return
    mode = _mode(config)
    if mode == "off":
        return
    from . import _jitwrap

    _jitwrap.acquire()
    recorder = _Recorder(mode)
    config.stash[_RECORDER] = recorder
    _runtime.add_sink(recorder)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    _install(early_config)
    _start(early_config)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: the typecheck_guard plugin does not flag typechecks that run "
        "while this test's jitted functions are called (they are still counted).",
    )
    _install(config)
    _start(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _INSTALLED in config.stash:
        if config.stash[_INSTALLED]:
            from ._install import uninstall

            uninstall()
        del config.stash[_INSTALLED]
    recorder = config.stash.get(_RECORDER, None)
    if recorder is None:
        return
    del config.stash[_RECORDER]
    _runtime.remove_sink(recorder)
    from . import _jitwrap

    _jitwrap.release()


def pytest_report_header(config: pytest.Config) -> list[str]:
    recorder = config.stash.get(_RECORDER, None)
    lines = [f"typecheck-guard: {recorder.mode}"] if recorder is not None else []
    if _INSTALLED in config.stash:
        lines.append("typecheck-guard: install() before collection")
    return lines


def _phase(item: pytest.Item) -> Any:
    __tracebackhide__ = True
    recorder = item.config.stash.get(_RECORDER, None)
    if recorder is None:
        return (yield)
    recorder.item = item
    recorder.allowed = item.get_closest_marker(MARKER) is not None
    recorder.pending = {}
    try:
        result = yield
    finally:
        pending, recorder.pending = recorder.pending, {}
        recorder.item = None
        recorder.allowed = False
    if pending:
        if recorder.mode == "warn":
            for site, (count, seconds) in pending.items():
                item.warn(
                    RuntimeTypecheckWarning(
                        _runtime.message(
                            {site: [count, seconds]}, "--typecheck-guard=warn"
                        )
                    )
                )
        else:
            # The jitted call raised RuntimeTypecheckError, and the test caught it.
            pytest.fail(
                _runtime.message(pending, "--typecheck-guard=strict"), pytrace=False
            )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    __tracebackhide__ = True
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    __tracebackhide__ = True
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    __tracebackhide__ = True
    return (yield from _phase(item))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    recorder = config.stash.get(_RECORDER, None)
    if recorder is None:
        return
    mode = f"--typecheck-guard={recorder.mode}"
    if not recorder.sites:
        terminalreporter.write_line(
            f"typecheck-guard: no typecheck ran in a jitted call outside tracing ({mode})."
        )
        return
    terminalreporter.write_sep("=", "typecheck-guard: typechecks run at dispatch time")
    terminalreporter.write_line(f"{'checks':>7} {'time':>11}  site")
    total_count, total_seconds = 0, 0.0
    ordered = sorted(recorder.sites.items(), key=lambda kv: -kv[1].seconds)
    for site, stats in ordered:
        total_count += stats.count
        total_seconds += stats.seconds
        tests = len(stats.tests)
        note = f"; {tests} test{'s' if tests != 1 else ''}"
        if stats.allowed:
            note += ", allowed"
        terminalreporter.write_line(
            f"{stats.count:>7} {stats.seconds * 1e3:>8.3f} ms  {site.checked} "
            f"({site.checker}) in {site.jitted} at {site.call_site}{note}"
        )
    terminalreporter.write_line(
        f"typecheck-guard: {total_count} runtime typecheck"
        f"{'s' if total_count != 1 else ''} at {len(ordered)} site"
        f"{'s' if len(ordered) != 1 else ''}, {total_seconds * 1e3:.3f} ms in all ({mode})."
    )
