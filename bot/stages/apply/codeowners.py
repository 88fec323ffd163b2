"""Code-owner review: the changed files whose owners have not approved, read from the base's CODEOWNERS.

A base branch whose protection requires code-owner reviews merges only when,
for every changed file that has owners, one of them approves. GitHub reads the
CODEOWNERS file of the base branch (``.github/``, the root, then ``docs/``;
the first found) with gitignore-like patterns where the last matching line
wins, and a pattern whose last part has a wildcard does not reach into
subdirectories (``docs/*`` owns ``docs/a.md``, not ``docs/x/b.md``). Owners are
``@user``, ``@org/team`` or an e-mail address; an e-mail is GitHub's to map to
an account, so promote names it and cannot count it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from infrarsi.seams.forge import Review, standing_reviews
from infrarsi.seams.workspace import Workspace

__all__ = ["LOCATIONS", "OwnerRule", "code_owner_blocker", "owners_of", "parse_codeowners"]

LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnerRule:
    pattern: str
    regex: re.Pattern[str]
    owners: tuple[str, ...]  # empty: explicitly nobody's (a later line can still own it)


def _regex(pattern: str) -> re.Pattern[str]:
    anchored = "/" in pattern.rstrip("/")  # a slash at the start or in the middle anchors to the root
    directory = pattern.endswith("/")
    body = pattern.strip("/")
    out = ""
    for token in re.split(r"(\*\*/|/\*\*|\*\*|\*|\?)", body):
        out += {"**/": "(?:.*/)?", "/**": "(?:/.*)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token,
                                                                                              re.escape(token))
    last = body.rsplit("/", 1)[-1]
    tail = "/.*" if directory else ("" if "*" in last else "(?:/.*)?")
    return re.compile(("^" if anchored else "^(?:.*/)?") + out + tail + "$")


def parse_codeowners(text: str) -> tuple[OwnerRule, ...]:
    """The rules of a CODEOWNERS file, in file order (comments and blank lines left out)."""
    rules = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        pattern, *owners = line.split()
        rules.append(OwnerRule(pattern=pattern, regex=_regex(pattern.replace("\\#", "#")), owners=tuple(owners)))
    return tuple(rules)


def owners_of(rules: tuple[OwnerRule, ...], path: str) -> tuple[str, ...]:
    """The owners of ``path``: the last matching rule's."""
    for rule in reversed(rules):
        if rule.regex.match(path):
            return rule.owners
    return ()


def _approved_by_owner(owners: tuple[str, ...], approving: tuple[str, ...],
                       team_member: Callable[[str, str], bool]) -> bool:
    logins = {a.lower() for a in approving}
    for owner in owners:
        name = owner.removeprefix("@")
        if "/" in name:
            if any(team_member(name, login) for login in approving):
                return True
        elif owner.startswith("@") and name.lower() in logins:
            return True
    return False


def code_owner_blocker(workspace: Workspace, base_sha: str, head_sha: str, reviews: tuple[Review, ...],
                       team_member: Callable[[str, str], bool]) -> str | None:
    """The clause naming the changed files no owner approved, or None (no CODEOWNERS, or every one approved).

    Changed files are the pull request's: ``head_sha`` against its merge base with ``base_sha``."""
    base_files = workspace.list_files(base_sha)
    found = next((loc for loc in LOCATIONS if loc in base_files), None)
    if found is None:
        return None
    rules = parse_codeowners(workspace.read_blob(base_files[found]).decode("utf-8", errors="replace"))
    since = workspace.list_files(workspace.merge_base(base_sha, head_sha))
    head_files = workspace.list_files(head_sha)
    changed = sorted(p for p in since.keys() | head_files.keys() if since.get(p) != head_files.get(p))
    approving, _ = standing_reviews(reviews)
    missing: dict[tuple[str, ...], list[str]] = {}
    for path in changed:
        owners = owners_of(rules, path)
        if owners and not _approved_by_owner(owners, approving, team_member):
            missing.setdefault(owners, []).append(path)
    if not missing:
        return None
    return f"code-owner review ({found}): " + "; ".join(
        f"{', '.join(paths)} need an approval by {' or '.join(owners)}" for owners, paths in missing.items())
