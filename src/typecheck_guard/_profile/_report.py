"""The profile's report: the headline, the table, the fix for each site, JSON and a
bar chart.

The fix depends on how a check was reached (`_guard/_situation.py`) and on what
`scan` says about the class: a rebuild by JAX (at a jitted call's dispatch, while it
compiles, in a tree operation) of a class `install()` covers is removed by calling
`install()` before the class is defined; one it does not cover by `unflatten_safe`;
an eager `PyTree[...]` check is made cheap by the cache; a check of your own code
while JAX traces it runs once per compilation, and is yours to keep.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from .._guard._fixes import unflatten_safe_fix
from ._data import Site, Totals

__all__ = [
    "fix",
    "format_text",
    "plot",
    "removable",
    "scan_says",
    "to_dict",
    "validate_top",
]

KEEP_TRACE: Final = (
    "your code, checked while JAX traced it: once per compilation, the check you "
    "asked for: keep it"
)

BAD_TOP: Final = (
    "{where}: `top` is how many sites to list, a whole number (0 or None: all of "
    "them); got {top!r}. Write, for example, prof.report(top=10)."
)


def validate_top(top: Any, where: str = "typecheck_guard.Profile.report") -> int | None:
    """`top` as `format_text` takes it: `None` for all sites, else a positive number.
    `0` means all, as the command line's `--top 0` does."""
    if top is None:
        return None
    if isinstance(top, bool) or not isinstance(top, int):
        raise TypeError(BAD_TOP.format(where=where, top=top))
    if top < 0:
        raise ValueError(BAD_TOP.format(where=where, top=top))
    return top or None


def _seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "0.0%"


def _short(name: str | None) -> str:
    """`jax.jit(__main__.train_step)` -> `train_step`."""
    if not name:
        return "step"
    inner = name.partition("(")[2].rstrip(")") or name
    short = inner.rsplit(".", 1)[-1]
    return short if short.isidentifier() else "step"


def _finding(site: Site) -> Any:
    """`scan`'s finding for the site's class, or `None` (not registered, adapted, or
    no checker on what its unflatten calls)."""
    if site.cls is None:
        return None
    try:
        from .._adapt._coverage import finding
        from .._adapt._unadapted import describe

        record = describe(site.cls)
        return None if record is None else finding(record)[0]
    except Exception:  # a report is no place to fail
        return None


def scan_says(site: Site) -> str | None:
    """What `typecheck-guard scan` says about the class of a rebuild (or of a check
    the profile can't tell from one)."""
    if (
        site.kind != "constructor"
        or site.cls is None
        or not (site.rebuild or site.when == "unclear")
    ):
        return None
    found = _finding(site)
    if found is None:
        from .._adapt._register import adapted_how
        from .._compat._jax import registry

        if adapted_how(site.cls) is not None:
            return "adapted by typecheck_guard: unflattens without its check"
        if site.cls not in registry():
            return "not a registered pytree class"
        return "its unflatten runs no check"
    return (
        f"registered by {found.registration}; {found.reason}; install() "
        f"{'covers' if found.install_covers else 'does not cover'} it; unflatten_safe "
        f"{'covers' if found.unflatten_safe_covers else 'does not cover'} it"
    )


def _install_fix(name: str, program: str | None) -> str:
    """How to run `program` under `install()`: the fix that edits no code first."""
    where = "first thing in your entry point"
    if program == "pytest" or (program or "").startswith("-m pytest"):
        run = "run pytest with --typecheck-guard-install"
        where = "at the top of your conftest.py"
    elif program:
        run = f"run it with `typecheck-guard run {program}`"
        if not program.startswith("-m "):
            where = f"the first line of {program}"
    else:
        run = "run the program with `typecheck-guard run`"
    return (
        f"{run}, or call typecheck_guard.install() before {name} is defined ({where})"
    )


def _covers(site: Site) -> tuple[bool, bool, Any]:
    """(install() covers the site's class, unflatten_safe does, scan's finding)."""
    found = _finding(site)
    by_install = found is None or found.install_covers
    by_safe = found is None or found.unflatten_safe_covers
    return by_install, by_safe, found


def removable(site: Site) -> bool:
    """Whether `install()` or `unflatten_safe` removes these checks: JAX rebuilding a
    class through its checked constructor, whether or not JAX is tracing."""
    if not site.rebuild or site.kind != "constructor":
        return False
    by_install, by_safe, _ = _covers(site)
    return by_install or by_safe


def _rebuild_fix(site: Site, program: str | None) -> str:
    name = site.name.rsplit(".", 1)[-1]
    by_install, by_safe, found = _covers(site)
    if site.when in ("dispatch", "compile") and site.jitted:
        safe = unflatten_safe_fix(site.jitted, site.made_at)
    else:
        safe = "put the tree operations in `with typecheck_guard.unflatten_safe():`"
    if by_install:
        return f"{_install_fix(name, program)}; or {safe}"
    if found is not None and found.registration.startswith("register_pytree_node"):
        alternative = f"; or {safe}" if by_safe else ""
        return (
            f"build the instance with object.__new__ in {name}.tree_unflatten "
            f"instead of calling {name}(...){alternative}"
        )
    if by_safe:
        return safe
    return found.fix if found is not None else safe


def _why(site: Site) -> str:
    """What ran the checks, for a rebuild: the first words of its fix."""
    name = _shown(site.name)
    if site.when == "compile":
        what = (
            f"JAX rebuilds {name} while it traces and compiles "
            f"{_shown(site.jitted) if site.jitted else 'a jitted function'} (once "
            "per compilation)"
        )
        swallowed = site.failed - site.fatal
        if swallowed:
            what += (
                f"; {swallowed} of these checks failed on the placeholder leaves "
                "JAX rebuilds it with, and JAX swallowed the errors after the "
                "checker built their messages"
            )
        return what + ": "
    if site.when == "dispatch":
        return ""
    if site.when == "callback":
        return f"JAX rebuilds {name} for {site.jitted or 'a host callback'}: "
    return ""


STOPPED: Final = (
    "this check failed and the program stopped here (its error ended the run); "
)


def fix(site: Site, program: str | None = None) -> str:
    """The concrete fix for a site, one line."""
    text = _fix(site, program)
    return STOPPED + text if site.fatal else text


def _fix(site: Site, program: str | None) -> str:
    if site.when == "verdict":
        return (
            "unflatten_safe checks this the first time its verdict cache sees the "
            "call's signature (its tree structure and its leaves' types, shapes and "
            "dtypes), and the pass stands for later calls with that signature, which "
            "skip the check: a check it runs on purpose, once per signature; keep it"
        )
    if site.rebuild and site.kind == "constructor":
        return _why(site) + _rebuild_fix(site, program)
    if site.rebuild:
        return (
            "a pytree node's unflatten function runs this check every time JAX "
            "rebuilds the node"
            + (f" (every call of {_shown(site.jitted)})" if site.jitted else "")
            + ": move the check out of it"
        )
    if site.when == "callback":
        return (
            "runs inside a JAX host callback, "
            + (f"{_shown(site.jitted)}, " if site.jitted else "")
            + "on every call: move the check out of the callback, or check the values "
            "once, outside the loop"
        )
    if site.hook is not None and site.when in ("dispatch", "tree"):
        return (
            f"jaxtyping's import hook checks every function of {site.hook} "
            f"(--jaxtyping-packages={site.hook},...): this is that package's own code, "
            f"run on every call{' of ' + _shown(site.jitted) if site.jitted else ''}; "
            "narrow --jaxtyping-packages to the modules you want checked"
        )
    if site.hook is not None and site.when != "unclear":
        return (
            f"checked because jaxtyping's import hook instruments every function of "
            f"{site.hook} (--jaxtyping-packages={site.hook},...): keep it if you mean "
            f"to check {site.hook}'s own code, else narrow --jaxtyping-packages to the "
            "modules you want checked"
        )
    if site.when == "dispatch":
        return (
            "code that JAX runs on every call"
            + (f" of {_shown(site.jitted)}" if site.jitted else "")
            + " (a pytree node's flatten function, or a library's dispatch) runs this "
            "check: move the check out of it"
        )
    if site.when == "unclear":
        name = site.name.rsplit(".", 1)[-1]
        return (
            f"can't tell: your code built {name} here, or JAX rebuilt it after a call "
            "of a jitted function made before the profile started, on a line whose "
            "call the profile can't read (its C++ dispatch leaves no trace). Make the "
            "jitted function inside the `with "
            "typecheck_guard.profile():` block, or run the program under "
            "`typecheck-guard profile`, which sees every call. If it is a rebuild, "
            + _rebuild_fix(site, program)
        )
    if site.when == "trace":
        return KEEP_TRACE
    if site.pytree and _cache_on():
        return (
            "the PyTree cache is on: a repeated PyTree[...] check of the same "
            "structure, types and shapes is a lookup; the rest is the check you asked for"
        )
    if site.pytree:
        return (
            "typecheck_guard.cache_pytree_checks() (on after install()): a repeated "
            "PyTree[...] check of the same structure, types and shapes becomes a lookup"
        )
    if site.when == "construction":
        return "a construction you asked to check: keep it"
    return (
        "a check you asked for, on every eager call: keep it, or call the function "
        "under jax.jit to check it once per trace"
    )


def _cache_on() -> bool:
    from .._cache import _pytree as _pytree_cache

    return bool(_pytree_cache._active)


def removable_seconds(prof: Totals) -> float:
    """The time of the checks that `install()` or `unflatten_safe` removes."""
    return sum(s.seconds for s in prof.sites if removable(s))


# Above this estimated slowdown the report says what profiling cost, and what its
# shares are of.
SHOWN_OVERHEAD: Final = 1.1


def overhead_line(prof: Totals) -> str | None:
    """What profiling cost this run, when it made it more than `SHOWN_OVERHEAD`
    times slower (by `Totals.profiler_seconds`, an estimate), and what the shares
    are of; `None` below that."""
    overhead = prof.overhead
    if prof.profiler_seconds == 0.0 and prof.estimated_profiler_seconds > (
        SHOWN_OVERHEAD - 1
    ) * max(prof.wall_seconds - prof.estimated_profiler_seconds, 0.0):
        return (
            "the profiler's own cost could not be told apart from the run's (its "
            f"estimate, {_seconds(prof.estimated_profiler_seconds)}, is not below the "
            f"{_seconds(max(prof.wall_seconds - prof.check_seconds, 0.0))} spent "
            "outside checks); the percentages are of the measured wall time"
        )
    if overhead <= SHOWN_OVERHEAD:
        return None
    return (
        f"profiling made this run about {overhead:.2f}x slower: "
        f"{_seconds(prof.profiler_seconds)} of its {_seconds(prof.wall_seconds)} was "
        "the profiler's own (an estimate); the percentages are of the "
        f"{_seconds(prof.unprofiled_seconds)} the run would have taken without it"
    )


def headline(prof: Totals) -> str:
    """What the checks took, of the wall time the run would have taken unprofiled
    (`Totals.unprofiled_seconds`), and how much of that is removable."""
    base = prof.unprofiled_seconds
    checks = prof.check_seconds
    if not prof.sites:
        return f"no typecheck ran in this process ({_seconds(prof.wall_seconds)} run)"
    text = (
        f"typechecks took {_percent(checks, base)} of the run ({_seconds(checks)} of "
        f"{_seconds(base)}); {_percent(removable_seconds(prof), checks)} of that is "
        "removable"
    )
    unclear = sum(s.seconds for s in prof.sites if s.when == "unclear")
    if unclear:
        text += f', and {_percent(unclear, checks)} may be ("unclear": see its fix)'
    return text


def _shown(name: str) -> str:
    # The program's own names: `TrainState`, not `__main__.TrainState`.
    return name.replace("__main__.", "")


def _label(site: Site) -> list[str]:
    """The site's name, in the parts a narrow column breaks it into: what was
    checked and by whom, the jitted function, the failures, the threads."""
    parts = [_shown(site.name), f"({site.checker})"]
    if site.jitted:
        parts.append(f"in {_shown(site.jitted)}")
    if site.failed:
        parts.append(f"[{site.failed} failed]")
    if len(site.threads) > 1 or (site.threads and "MainThread" not in site.threads):
        parts.append(f"[threads: {', '.join(sorted(site.threads))}]")
    return parts


# The report fits a terminal of this many columns, and the documentation's code
# blocks at 1280 px.
WIDTH: Final = 100


def _breakable(word: str) -> list[str]:
    """`word`, cut after its dots, slashes and colons (a dotted name, a path, a
    test id), so that no piece is longer than it must be."""
    pieces, start = [], 0
    for i, char in enumerate(word):
        if char in "./:" and i + 1 < len(word) and word[i + 1] not in "./:":
            pieces.append(word[start : i + 1])
            start = i + 1
    pieces.append(word[start:])
    return [p for p in pieces if p]


def _fit(parts: list[str], width: int) -> list[str]:
    """`parts` as lines of at most `width` characters: a part goes on the line
    before it when it fits there, else starts its own, broken at spaces, and a name
    longer than a line after its dots."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
            continue
        line = ""
        for word in part.split(" "):
            pieces = [word] if len(word) <= width else _breakable(word)
            for i, piece in enumerate(pieces):
                glue = " " if line and i == 0 else ""
                if line and len(line) + len(glue) + len(piece) > width:
                    lines.append(line)
                    line, glue = "", ""
                line += glue + piece
        lines.append(line)
    return lines


def _wrapped(first: str, text: str, width: int = 88) -> list[str]:
    import textwrap

    return textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=" " * len(first),
        break_long_words=False,
        break_on_hyphens=False,
    )


# The table's columns before the site's: `#`, checks, time, per check, first call,
# share, when.
_ROW: Final = "{:>3} {:>6} {:>9} {:>9} {:>10} {:>6}  {:<12}  "


def format_text(
    prof: Totals, top: int | None = 20, more: str = "report(top=0) lists them all"
) -> str:
    """The report as text, at most `WIDTH` columns wide (a long site name is broken
    over lines, in its column). `top`: how many sites to list (`None` or 0: all);
    `more`: how to list the others, in the words of whoever asked (the command
    line's `--top 0`, the API's `report(top=0)`)."""
    top = validate_top(top)
    sites = prof.sites
    shown = sites if top is None else sites[:top]
    base = prof.unprofiled_seconds
    # The headline's clauses on lines of their own: what the checks took, then how
    # much of that is removable.
    first, *clauses = f"typecheck-guard profile: {headline(prof)}.".split("; ")
    lines = _wrapped("", first + (";" if clauses else ""), WIDTH)
    for clause in clauses:
        lines.extend(_wrapped("", clause, WIDTH))
    overhead = overhead_line(prof)
    if overhead is not None:
        lines.extend(_wrapped("", f"{overhead[0].upper()}{overhead[1:]}.", WIDTH))
    if not sites:
        return "\n".join(lines)
    lines.append("")
    header = _ROW.format(
        "#", "checks", "time", "per check", "first call", "share", "when"
    )
    lines.append(header + "site")
    indent = " " * len(header)
    for i, site in enumerate(shown, 1):
        first = _seconds(site.setup_seconds) if site.first_calls else "-"
        row = _ROW.format(
            i,
            site.count,
            _seconds(site.seconds),
            _seconds(site.per_check),
            first,
            _percent(site.seconds, base),
            site.when,
        )
        label = _fit(_label(site), WIDTH - len(indent))
        lines.append(row + label[0])
        lines.extend(indent + rest for rest in label[1:])
    rest = sites[len(shown) :]
    if rest:
        lines.extend(
            _wrapped(
                "    ",
                f"({len(rest)} more site{'s' if len(rest) != 1 else ''}, "
                f"{sum(s.count for s in rest)} checks, "
                f"{_seconds(sum(s.seconds for s in rest))}: {more})",
                WIDTH,
            )
        )
    lines.append("")
    lines.append("fixes:")
    for i, site in enumerate(shown, 1):
        lines.extend(_wrapped(f"{i:>3}. ", fix(site, prof.program)))
        said = scan_says(site)
        if said:
            lines.extend(_wrapped("     scan: ", said))
    if prof.setup_probes:
        lines.extend(
            _wrapped(
                "  ",
                f"(not counted: {prof.setup_probes} isinstance "
                f"probe{'s' if prof.setup_probes != 1 else ''} that checkers ran on "
                "their own annotations while decorating)",
            )
        )
    tests = _tests(prof)
    if tests:
        lines.append("")
        lines.append("tests that spent the most in checks:")
        for test, seconds in tests[: top or len(tests)]:
            first_line, *others = _fit([test], WIDTH - 14)
            lines.append(f"  {_seconds(seconds):>10}  {first_line}")
            lines.extend(" " * 14 + other for other in others)
    lines.append("")
    unwatched = ""
    if prof.unwatched:
        unwatched = (
            f"; not watched on Python {sys.version_info[0]}.{sys.version_info[1]}: "
            f"{prof.unwatched} (profile(every_checker=True) or --every-checker "
            "watches them, slower)"
        )
    lines.extend(
        _wrapped(
            "",
            "(per check: the steady state; first call: the first check of each "
            "checked function, and its first failed one, with the checker's one-time "
            "setup; share: of the wall "
            "time less the profiler's own, as estimated; this process only: the "
            "processes it starts are not watched"
            f"{unwatched})",
        )
    )
    return "\n".join(lines)


def _tests(prof: Totals) -> list[tuple[str, float]]:
    totals: dict[str, float] = {}
    for site in prof.sites:
        for test, seconds in site.tests.items():
            totals[test] = totals.get(test, 0.0) + seconds
    return sorted(totals.items(), key=lambda kv: -kv[1])


def to_dict(prof: Totals) -> dict[str, Any]:
    base = prof.unprofiled_seconds
    return {
        "program": prof.program,
        "python": ".".join(map(str, sys.version_info[:3])),
        "wall_seconds": prof.wall_seconds,
        "profiler_seconds": prof.profiler_seconds,
        "estimated_profiler_seconds": prof.estimated_profiler_seconds,
        "unprofiled_seconds": base,
        "overhead": prof.overhead,
        "check_seconds": prof.check_seconds,
        "removable_seconds": removable_seconds(prof),
        "headline": headline(prof),
        "sites": [
            {
                "site": site.name,
                "checked": site.checked,
                "checker": site.checker,
                "when": site.when,
                "kind": site.kind,
                "jitted": site.jitted,
                "rebuild": site.rebuild,
                "removable": removable(site),
                "failed": site.failed,
                "import_hook": site.hook,
                "count": site.count,
                "seconds": site.seconds,
                "per_check_seconds": site.per_check,
                "first_calls": site.first_calls,
                "setup_seconds": site.setup_seconds,
                "share": site.seconds / base if base > 0 else 0.0,
                "fix": fix(site, prof.program),
                "scan": scan_says(site),
                "threads": sorted(site.threads),
                "tests": dict(sorted(site.tests.items(), key=lambda kv: -kv[1])),
            }
            for site in prof.sites
        ],
    }


_COLORS: Final = {
    "dispatch": "#d62728",
    "compile": "#e377c2",
    "tree": "#ff7f0e",
    "callback": "#8c564b",
    "unclear": "#bcbd22",
    "verdict": "#2ca02c",
    "construction": "#1f77b4",
    "eager": "#9467bd",
    "trace": "#7f7f7f",
}


def plot(prof: Totals, path: str, top: int | None = 20) -> None:
    """A horizontal bar chart of the sites' time, coloured by `when` (PNG, SVG, ...
    by the file's extension)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top = validate_top(top)
    sites = list(prof.sites if top is None else prof.sites[:top])[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * max(len(sites), 2) + 1.5))
    labels = [
        f"{s.name.rsplit('.', 1)[-1]} ({s.when}{', ' + _short(s.jitted) if s.jitted else ''})"
        for s in sites
    ]
    ax.barh(
        range(len(sites)),
        [s.seconds * 1e3 for s in sites],
        color=[_COLORS.get(s.when, "#333333") for s in sites],
    )
    ax.set_yticks(range(len(sites)), labels)
    for i, s in enumerate(sites):
        ax.annotate(
            f" {s.count} checks",
            (s.seconds * 1e3, i),
            va="center",
            fontsize=8,
        )
    ax.set_xlabel("time in typechecks (ms)")
    ax.set_title(headline(prof), fontsize=9)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=color)  # pyright: ignore[reportPrivateImportUsage]
        for color in _COLORS.values()
    ]
    ax.legend(handles, list(_COLORS), fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
