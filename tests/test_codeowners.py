"""CODEOWNERS patterns as GitHub documents them: gitignore-like, the last matching line wins."""

from __future__ import annotations

import pytest

from bot.stages.apply.codeowners import owners_of, parse_codeowners

RULES = parse_codeowners("""\
# comment
*       @global
*.js    @js-owner  # an inline comment
/build/logs/ @logs
docs/*  @docs
apps/   @apps
**/vendor @vendor
/scripts/run.sh @acme/ops
unowned.txt
""")


@pytest.mark.parametrize(("path", "owners"), [
    ("README.md", ("@global",)),
    ("src/app.js", ("@js-owner",)),
    ("build/logs/today.log", ("@logs",)),
    ("src/build/logs/today.log", ("@global",)),  # anchored at the root
    ("docs/index.md", ("@docs",)),
    ("docs/guide/deep.md", ("@global",)),  # docs/* does not reach into subdirectories
    ("apps/web/main.py", ("@apps",)),
    ("src/apps/x.py", ("@apps",)),  # a trailing slash alone does not anchor
    ("a/b/vendor/lib.c", ("@vendor",)),
    ("scripts/run.sh", ("@acme/ops",)),
    ("unowned.txt", ()),
])
def test_owners_of(path: str, owners: tuple[str, ...]) -> None:
    assert owners_of(RULES, path) == owners
