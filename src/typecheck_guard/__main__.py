"""`python -m typecheck_guard`: the `typecheck-guard` command."""

from ._tools._cli import main

raise SystemExit(main())
