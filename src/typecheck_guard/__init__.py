"""typecheck_guard: runtime typechecks for JAX code that run once, at trace time.

Importing this package does not import jax, flax or equinox.
"""

from ._adapt._register import register_dataclass as register_dataclass
from ._adapt._unadapted import UnadaptedClass as UnadaptedClass, unadapted as unadapted
from ._cache._pytree import (
    PyTreeCacheInfo as PyTreeCacheInfo,
    cache_pytree_checks as cache_pytree_checks,
    clear_pytree_cache as clear_pytree_cache,
    pytree_cache_info as pytree_cache_info,
)
from ._guard._runtime import (
    RuntimeTypecheckError as RuntimeTypecheckError,
    runtime_checks as runtime_checks,
)
from ._install import (
    PartsDisabledWarning as PartsDisabledWarning,
    UnadaptedClassesWarning as UnadaptedClassesWarning,
    install as install,
    installed as installed,
    uninstall as uninstall,
)
from ._profile._api import Profile as Profile, profile as profile
from ._profile._data import Site as Site
from ._unflatten._check import check as check
from ._unflatten._safe import unflatten_safe as unflatten_safe

# 0.1.0 is the first release; until it is tagged, what is built from a checkout is a
# development release of it (PEP 440), which pip never takes for 0.1.0 itself. When
# tagging: drop ".dev0" here and in the citations (README.md, docs/index.md), and
# give CHANGELOG.md's UNRELEASED section the version and the date.
__version__ = "0.1.0.dev0"
