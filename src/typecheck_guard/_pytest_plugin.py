"""The pytest plugin: flag typechecks that run while a jitted function is called,
outside tracing (they run again on every step of a training loop).

- `--typecheck-guard=off|warn|strict`, or `typecheck_guard = ...` in the ini file
  (`[tool.pytest.ini_options]`); `off` by default, and then the plugin imports
  nothing and patches nothing.
- `strict`: the jitted call raises `typecheck_guard.RuntimeTypecheckError` (and a
  test that swallowed it still fails); `warn`: the sites are reported in the
  end-of-session summary, with their fixes, and no test's outcome changes. (Not as
  Python warnings: `filterwarnings = ["error"]` is the norm in this ecosystem, and
  it would turn each one into a failure.)
- `@pytest.mark.allow_runtime_typechecks` exempts a test (its checks are still
  counted in the summary, marked "allowed").
- Checks inside host callbacks (`jax.pure_callback`, `io_callback`,
  `jax.debug.callback`) run on every call by design: they are counted, as their own
  kind, but flagged only under `--typecheck-guard-callbacks=warn|strict` (ini
  `typecheck_guard_callbacks`; default `allow`).
- An end-of-session summary: each flagged site, how many checks, how long they
  took (the checks' own time, with the first check's one-time setup apart), and
  one line for the allowed ones (`-v` lists them).
- `--typecheck-guard-install`, or `typecheck_guard_install = true` in the ini file:
  `typecheck_guard.install()` before conftest files and test modules are imported
  (independent of the mode; undone in `pytest_unconfigure`). It imports no JAX: a
  conftest can still configure JAX through the environment before importing it;
  and
  `TYPECHECK_GUARD=install` in the environment meanwhile, so that the Python
  processes the session starts (pytest-xdist workers, `multiprocessing` children,
  `subprocess` Pythons) install too (`_startup.py`).

The guard is switched on in `pytest_load_initial_conftests`, before conftest files
and test modules are imported, so that `@jax.jit` at module level is covered. The
guard's patches are released in `pytest_unconfigure`; sessions nested in one
process (pytester's `runpytest`) each record their own checks.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from ._guard import _watch
from ._guard._watch import Site, Tally

# `--typecheck-guard-profile` is its own plugin module, loaded with this one.
pytest_plugins = ["typecheck_guard._profile._pytest"]

MODES: Final = ("off", "warn", "strict")
CALLBACK_MODES: Final = ("allow", "warn", "strict")
MARKER: Final = "allow_runtime_typechecks"

BAD_CALLBACKS_INI: Final = (
    "typecheck_guard_callbacks = {value!r} in {inifile}: the modes for checks inside "
    "host callbacks are 'allow' (the default), 'warn' and 'strict'. Write, for "
    'example, `typecheck_guard_callbacks = "strict"` under [tool.pytest.ini_options], '
    "or pass --typecheck-guard-callbacks=strict."
)

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


class _Stats:
    __slots__ = ("entry", "allowed", "tests", "warned")

    def __init__(self) -> None:
        # [count, seconds, first_count, first_seconds], as in `_watch.Tally`.
        self.entry: list[Any] = [0, 0.0, 0, 0.0]
        self.allowed = True
        self.tests: set[str] = set()
        # Flagged under `warn`: reported in the summary, the tests unchanged.
        self.warned = False


_COLLECTING: Final = "<collection>"


class _Recorder:
    """One session's sink: what each test ran, and the session's totals."""

    def __init__(self, mode: str, callbacks: str = "allow"):
        self.mode = mode
        self.callbacks = callbacks
        self.item: pytest.Item | None = None
        self.allowed = False
        self.pending: Tally = {}
        self.sites: dict[Site, _Stats] = {}

    def mode_of(self, site: Site) -> str:
        """`warn` or `strict` if `site` is flagged outside a marked test, else `allow`."""
        return self.callbacks if site.kind == "callback" else self.mode

    def __call__(self, tally: Tally) -> bool:
        flagged: Tally = {}
        for site, entry in tally.items():
            stats = self.sites.get(site)
            if stats is None:
                stats = self.sites[site] = _Stats()
            for i, value in enumerate(entry):
                stats.entry[i] += value
            stats.tests.add(self.item.nodeid if self.item is not None else _COLLECTING)
            if self.allowed or self.mode_of(site) == "allow":
                continue
            stats.allowed = False
            if self.item is None or self.mode_of(site) == "warn":
                # Outside a test (a module-level call while collecting) there is
                # nothing to fail; under `warn`, nothing fails.
                stats.warned = True
                continue
            flagged[site] = entry
            pending = self.pending.setdefault(site, [0, 0.0, 0, 0.0])
            for i, value in enumerate(entry):
                pending[i] += value
        # Callback sites are never raised from (see `_watch.watch_callback`); a
        # strict one fails the test when it ends.
        return any(site.kind != "callback" for site in flagged)


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
        "tracing: 'warn' reports them at the end of the session (no test fails), "
        "'strict' fails the test (default: the 'typecheck_guard' ini value, else "
        "'off').",
    )
    parser.addini(
        "typecheck_guard",
        help="default for --typecheck-guard: off, warn or strict.",
        default="off",
    )
    group.addoption(
        "--typecheck-guard-callbacks",
        dest="typecheck_guard_callbacks",
        choices=CALLBACK_MODES,
        default=None,
        metavar="{allow,warn,strict}",
        help="what --typecheck-guard does with typechecks inside host callbacks "
        "(jax.pure_callback, io_callback, jax.debug.callback), which run on every "
        "call by design: 'allow' counts them in the summary (default: the "
        "'typecheck_guard_callbacks' ini value, else 'allow'), 'warn' reports them "
        "at the end, 'strict' fails the test.",
    )
    parser.addini(
        "typecheck_guard_callbacks",
        help="default for --typecheck-guard-callbacks: allow, warn or strict.",
        default="allow",
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


def _choice(
    config: pytest.Config, name: str, choices: Any, default: str, message: str
) -> str:
    """The option `name` (command line first, then the ini value, then `default`);
    an ini value outside `choices` is a usage error saying so (`message`)."""
    value = getattr(config.known_args_namespace, name, None)
    if value is None:
        value = config.getoption(name, None)
    if value is None:
        value = str(config.getini(name)).strip().strip("'\"") or default
        if value not in choices:
            raise pytest.UsageError(
                message.format(value=value, inifile=config.inipath or "the ini file")
            )
    return value


def _mode(config: pytest.Config) -> str:
    return _choice(config, "typecheck_guard", MODES, "off", BAD_INI)


def _callbacks_mode(config: pytest.Config) -> str:
    return _choice(
        config, "typecheck_guard_callbacks", CALLBACK_MODES, "allow", BAD_CALLBACKS_INI
    )


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
# What `TYPECHECK_GUARD` was before the session set it (`None`: unset).
_VARIABLE = pytest.StashKey["str | None"]()


def _install(config: pytest.Config) -> None:
    if _INSTALLED in config.stash or not _wants_install(config):
        return
    from ._install import install, installed
    from ._startup import propagate

    config.stash[_INSTALLED] = not installed()
    config.stash[_VARIABLE] = propagate()
    install()


def _start(config: pytest.Config, before_collection: bool) -> None:
    if _RECORDER in config.stash:
        return
    mode = _mode(config)
    if mode == "off":
        return
    callbacks = _callbacks_mode(config)
    from ._guard import _jitwrap

    _jitwrap.acquire(before_program=before_collection)
    recorder = _Recorder(mode, callbacks)
    config.stash[_RECORDER] = recorder
    _watch.add_sink(recorder)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    _install(early_config)
    _start(early_config, True)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: the typecheck_guard plugin does not flag typechecks that run "
        "while this test's jitted functions are called (they are still counted).",
    )
    _install(config)
    _start(config, False)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _INSTALLED in config.stash:
        if config.stash[_INSTALLED]:
            from ._install import uninstall

            uninstall()
        del config.stash[_INSTALLED]
    if _VARIABLE in config.stash:
        from ._startup import restore

        restore(config.stash[_VARIABLE])
        del config.stash[_VARIABLE]
    recorder = config.stash.get(_RECORDER, None)
    if recorder is None:
        return
    del config.stash[_RECORDER]
    _watch.remove_sink(recorder)
    from ._guard import _jitwrap

    _jitwrap.release()


def pytest_report_header(config: pytest.Config) -> list[str]:
    recorder = config.stash.get(_RECORDER, None)
    lines = []
    if recorder is not None:
        header = f"typecheck-guard: {recorder.mode}"
        if recorder.callbacks != "allow":
            header += f", host callbacks: {recorder.callbacks}"
        lines.append(header)
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
        # Strict sites only (`_Recorder`): the jitted call raised
        # RuntimeTypecheckError and the test caught it, or a host callback ran a
        # check (never raised from inside the callback).
        why = (
            "--typecheck-guard-callbacks=strict"
            if all(site.kind == "callback" for site in pending)
            else "--typecheck-guard=strict"
        )
        pytest.fail(_watch.message(pending, why), pytrace=False)
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


def _line(site: Site, stats: _Stats) -> str:
    count, seconds, first_count, first_seconds = stats.entry
    tests = len(stats.tests - {_COLLECTING})
    note = f"; {tests} test{'s' if tests != 1 else ''}"
    if _COLLECTING in stats.tests:
        note += ", and while collecting"
    if first_count:
        note += f"; first check +{first_seconds * 1e3:.3f} ms (one-time setup)"
    if site.kind == "callback":
        note += "; host callback"
    if stats.allowed:
        note += ", allowed"
    return (
        f"{count:>7} {seconds * 1e3:>8.3f} ms  {site.checked} ({site.checker}) in "
        f"{site.jitted} at {site.call_site}{note}"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


XDIST_CONTROLLER: Final = (
    "typecheck-guard: the tests ran in pytest-xdist workers, each watched by its own "
    "guard (under strict, a check at dispatch time fails its test there); this "
    "process ran none, and the workers' counts are not in this summary."
)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    recorder = config.stash.get(_RECORDER, None)
    if recorder is None:
        return
    if config.pluginmanager.getplugin("dsession") is not None:
        terminalreporter.write_line(XDIST_CONTROLLER)
        return
    mode = f"--typecheck-guard={recorder.mode}"
    if recorder.callbacks != "allow":
        mode += f" --typecheck-guard-callbacks={recorder.callbacks}"
    if not recorder.sites:
        terminalreporter.write_line(
            f"typecheck-guard: no typecheck ran in a jitted call outside tracing ({mode})."
        )
        return
    verbose = (config.getoption("verbose", 0) or 0) > 0
    ordered = sorted(recorder.sites.items(), key=lambda kv: -kv[1].entry[1])
    flagged = [(site, stats) for site, stats in ordered if not stats.allowed]
    allowed = [(site, stats) for site, stats in ordered if stats.allowed]
    shown = ordered if verbose else flagged
    if shown:
        terminalreporter.write_sep(
            "=", "typecheck-guard: typechecks run at dispatch time"
        )
        terminalreporter.write_line(f"{'checks':>7} {'time':>11}  site")
        for site, stats in shown if verbose else shown[:_SHOWN]:
            terminalreporter.write_line(_line(site, stats))
        if not verbose and len(shown) > _SHOWN:
            rest = shown[_SHOWN:]
            terminalreporter.write_line(
                f"        ({_plural(len(rest), 'more site')}, "
                f"{sum(stats.entry[0] for _, stats in rest)} checks, "
                f"{sum(stats.entry[1] for _, stats in rest) * 1e3:.3f} ms: -v lists "
                "them)"
            )
    warned = [(site, stats) for site, stats in flagged if stats.warned]
    if warned:
        # What `warn` reports instead of failing (a test's own report is left
        # alone): the checks jaxtyping's import hook added to a library, one block
        # per library; then each other site's message and fix, and its tests.
        terminalreporter.write_line("")
        hooked: dict[str, list[tuple[Site, _Stats]]] = {}
        own = []
        for site, stats in warned:
            if site.hook is not None and site.kind != "constructor":
                hooked.setdefault(site.hook, []).append((site, stats))
            else:
                own.append((site, stats))
        for package, sites in hooked.items():
            _write(terminalreporter, _hooked_message(recorder, package, sites))
        for site, stats in own if verbose else own[:_SHOWN]:
            text = _watch.message({site: stats.entry}, _why_reported(recorder, site))
            _write(terminalreporter, text + "\n" + _tests_line(stats.tests, verbose))
        if not verbose and len(own) > _SHOWN:
            terminalreporter.write_line(
                f"({_plural(len(own) - _SHOWN, 'more site')}: -v lists them)"
            )
            terminalreporter.write_line("")
    if allowed and not verbose:
        count = sum(stats.entry[0] for _, stats in allowed)
        seconds = sum(stats.entry[1] for _, stats in allowed)
        callbacks = sum(1 for site, _ in allowed if site.kind == "callback")
        terminalreporter.write_line(
            f"typecheck-guard: {_plural(count, 'allowed check')} at "
            f"{_plural(len(allowed), 'site')} "
            f"({callbacks} in host callbacks, {len(allowed) - callbacks} in tests "
            f"marked {MARKER}), {seconds * 1e3:.3f} ms; -v lists them."
        )
    if not flagged:
        terminalreporter.write_line(
            f"typecheck-guard: nothing flagged ({mode}): every typecheck at dispatch "
            "time was allowed."
        )
        return
    total_count = sum(stats.entry[0] for _, stats in flagged)
    total_seconds = sum(stats.entry[1] for _, stats in flagged)
    first_seconds = sum(stats.entry[3] for _, stats in flagged)
    outcome = (
        "reported above, no test failed for them"
        if all(stats.warned for _, stats in flagged)
        else "the tests that ran them failed"
    )
    terminalreporter.write_line(
        f"typecheck-guard: {_plural(total_count, 'runtime typecheck')} flagged at "
        f"{_plural(len(flagged), 'site')}, {total_seconds * 1e3:.3f} ms "
        f"steady-state + {first_seconds * 1e3:.3f} ms in first checks (one-time "
        f"setup) ({mode}: {outcome})."
    )


# Sites listed in the summary without -v.
_SHOWN: Final = 20

HOOKED: Final = (
    "typecheck_guard: {count} of {package}'s own code ran at dispatch time, at "
    "{sites} in {tests} (the most time: {names}).\n"
    "\n"
    "They are checked because jaxtyping's import hook instruments every function of "
    "{package} (pytest --jaxtyping-packages={package},..., or install_import_hook), "
    "and that code runs on every call of a jitted function (Equinox's filter_jit "
    "dispatch, a pytree node's flatten function, ...): these are not checks you "
    "wrote. To keep checking your code without them, narrow --jaxtyping-packages to "
    "the modules you want checked.\n"
    "({why})"
)


def _write(terminalreporter: Any, text: str) -> None:
    for line in text.splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line("")


def _tests_line(tests: set[str], verbose: bool) -> str:
    ordered = sorted(tests)
    listed = ordered if verbose else ordered[:5]
    more = len(ordered) - len(listed)
    return (
        "in: "
        + ", ".join(listed)
        + (f" and {more} more (-v lists them)" if more else "")
    )


def _hooked_message(
    recorder: _Recorder, package: str, sites: list[tuple[Site, _Stats]]
) -> str:
    tests: set[str] = set()
    for _, stats in sites:
        tests |= stats.tests - {_COLLECTING}
    names = ", ".join(
        dict.fromkeys(site.checked.rsplit(".", 1)[-1] for site, _ in sites[:3])
    )
    return HOOKED.format(
        count=_plural(sum(stats.entry[0] for _, stats in sites), "check"),
        package=package,
        sites=_plural(len(sites), "site"),
        tests=_plural(len(tests), "test"),
        names=names,
        why=_why_reported(recorder, sites[0][0]),
    )


def _why_reported(recorder: _Recorder, site: Site) -> str:
    if recorder.mode_of(site) == "strict":  # only while collecting
        return "while collecting, outside any test: nothing to fail"
    option = "--typecheck-guard" + ("-callbacks" if site.kind == "callback" else "")
    return f"{option}=warn: reported here; no test fails for it"
