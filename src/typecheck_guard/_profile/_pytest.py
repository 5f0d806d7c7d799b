"""`pytest --typecheck-guard-profile`: the profile of `typecheck-guard profile` for a
test run, with the tests that spent the most time in checks.

Loaded with the main plugin (its `pytest_plugins`); with the option off it imports
and patches nothing. Like the runtime guard, we start before conftest files and test
modules are imported, so that jitted functions made at import time are seen.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

_PROFILE = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("typecheck-guard")
    group.addoption(
        "--typecheck-guard-profile",
        dest="typecheck_guard_profile",
        action="store_true",
        default=False,
        help="record every typecheck the tests run and report, at the end, the sites "
        "(what was checked, how it was reached, count, time, fix) and the tests that "
        "spent the most time in checks.",
    )


def _wanted(config: pytest.Config) -> bool:
    value = getattr(config.known_args_namespace, "typecheck_guard_profile", None)
    if value is None:
        value = config.getoption("typecheck_guard_profile", False)
    return bool(value)


def _start(config: pytest.Config, before_collection: bool) -> None:
    if _PROFILE in config.stash or not _wanted(config):
        return
    from ._api import Profile

    prof = Profile()
    prof.program = "pytest"
    prof._before_program = before_collection
    config.stash[_PROFILE] = prof
    prof.start()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    _start(early_config, True)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _start(config, False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None]:
    prof = item.config.stash.get(_PROFILE, None)
    if prof is None:
        return (yield)
    prof.label = item.nodeid
    try:
        return (yield)
    finally:
        prof.label = None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    prof = config.stash.get(_PROFILE, None)
    if prof is None:
        return
    from ._report import format_text

    prof.stop()
    terminalreporter.write_sep("=", "typecheck-guard profile")
    more = "typecheck-guard profile -m pytest ... --top 0 lists them all"
    for line in format_text(prof, top=20, more=more).splitlines():
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    prof = config.stash.get(_PROFILE, None)
    if prof is None:
        return
    del config.stash[_PROFILE]
    prof.stop()
