"""GitHub's merge settings and branch protection, read from the shapes GitHub documents (``docs.github.com/rest``).

Four sources say how a pull request may be merged into a base branch, each
readable with a different permission, so each is read on its own and what
could not be read is said, never assumed absent:

- the repository object: ``allow_merge_commit``, ``allow_squash_merge``,
  ``allow_rebase_merge`` (left out for many tokens: a workflow's
  ``GITHUB_TOKEN``, reportedly a fine-grained token even with Administration:
  read; a missing key means "not said", not "allowed");
- the branch (``GET /branches/{b}``): ``protected`` and the required status
  checks of its protection summary (Contents: read);
- the branch protection (``GET /branches/{b}/protection``): required checks,
  ``required_pull_request_reviews`` (approving review count, code-owner
  reviews), ``required_linear_history`` (Administration: read; 403 or 404
  without it);
- the rules that apply to the branch (``GET /rules/branches/{b}``, rulesets at
  repository or organization level): ``pull_request``,
  ``required_status_checks``, ``required_linear_history``, ``merge_queue``
  (Metadata: read); and GraphQL's ``mergeQueue(branch:)`` for a queue set in
  classic branch protection.

This module turns those payloads into one :class:`Protection`; the forge does the requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from infrarsi.seams.forge import MERGE_METHODS, MergeMethod

__all__ = ["ENQUEUE", "MERGE_QUEUE", "MERGE_SETTINGS", "QUEUE_ENTRY", "Protection", "from_protection",
           "from_rules", "from_settings", "method_refused", "queue_method", "required_contexts"]

# Each merge method and the repository object's key that allows it.
MERGE_SETTINGS: tuple[tuple[MergeMethod, str], ...] = (
    ("merge", "allow_merge_commit"), ("squash", "allow_squash_merge"), ("rebase", "allow_rebase_merge"))
# GitHub's 405 for a method the repository or the branch refuses ("Merge commits are not allowed on this
# repository.", "Squash merges are not allowed ...", a linear history's "... must not contain merge commits").
_METHOD_REFUSED = re.compile(r"(merge commits|squash merges|rebase merges) are not allowed|must not contain merge "
                             r"commits", re.IGNORECASE)

MERGE_QUEUE = """query($owner: String!, $name: String!, $branch: String!) {
  repository(owner: $owner, name: $name) { mergeQueue(branch: $branch) { url configuration { mergeMethod } } }
}"""
QUEUE_ENTRY = """query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) { id headRefOid mergeQueueEntry { position state } }
  }
}"""
ENQUEUE = """mutation($pullRequestId: ID!, $expectedHeadOid: GitObjectID) {
  enqueuePullRequest(input: {pullRequestId: $pullRequestId, expectedHeadOid: $expectedHeadOid}) {
    mergeQueueEntry { position state }
  }
}"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Protection:
    """The merge rules of one base branch as read so far (see :class:`infrarsi.seams.forge.MergeRules`)."""

    refused_methods: tuple[tuple[MergeMethod, str], ...] = ()
    contexts: frozenset[str] = field(default_factory=frozenset)
    required_approvals: int = 0
    code_owner_reviews: bool = False
    linear_history: bool = False
    merge_queue: bool = False
    queue_method: MergeMethod | None = None


def method_refused(status: int, message: str) -> bool:
    """Whether GitHub's answer to a merge refuses the merge method itself (another may still be allowed)."""
    return status == 405 and bool(_METHOD_REFUSED.search(message))


def queue_method(value: Any) -> MergeMethod | None:
    """GitHub's ``MERGE``/``SQUASH``/``REBASE`` (a queue's method) as a merge method; None when not one."""
    method = str(value or "").lower()
    return method if method in MERGE_METHODS else None  # type: ignore[return-value]


def required_contexts(checks: dict[str, Any]) -> frozenset[str]:
    """The contexts of a ``required_status_checks`` object (``contexts`` and ``checks[].context``)."""
    return frozenset(checks.get("contexts") or ()) | {c["context"] for c in checks.get("checks") or ()
                                                      if c.get("context")}


def from_settings(repository: dict[str, Any]) -> tuple[tuple[MergeMethod, str], ...] | None:
    """The merge methods the repository object refuses, or None when it does not show its ``allow_*`` keys."""
    if not all(key in repository for _, key in MERGE_SETTINGS):
        return None
    return tuple((m, f"the repository's {key} is false") for m, key in MERGE_SETTINGS if not repository[key])


def from_protection(got: Protection, protection: dict[str, Any]) -> Protection:
    """``got`` with the rules of a branch protection object (``GET /branches/{b}/protection``)."""
    reviews = protection.get("required_pull_request_reviews") or {}
    return replace(got, contexts=got.contexts | required_contexts(protection.get("required_status_checks") or {}),
                   required_approvals=max(got.required_approvals,
                                          int(reviews.get("required_approving_review_count") or 0)),
                   code_owner_reviews=got.code_owner_reviews or bool(reviews.get("require_code_owner_reviews")),
                   linear_history=got.linear_history or bool(
                       (protection.get("required_linear_history") or {}).get("enabled")))


def from_rules(got: Protection, rules: list[dict[str, Any]]) -> Protection:
    """``got`` with the active rules that apply to the branch (``GET /rules/branches/{b}``)."""
    for rule in rules:
        params = rule.get("parameters") or {}
        source = f"ruleset {rule.get('ruleset_id', '?')}" + (f" of {rule['ruleset_source']}"
                                                            if rule.get("ruleset_source") else "")
        kind = rule.get("type")
        if kind == "pull_request":
            allowed = params.get("allowed_merge_methods")
            got = replace(got, required_approvals=max(got.required_approvals,
                                                      int(params.get("required_approving_review_count") or 0)),
                          code_owner_reviews=got.code_owner_reviews or bool(params.get("require_code_owner_review")),
                          refused_methods=got.refused_methods + tuple(
                              (m, f"{source} allows only {', '.join(allowed)}") for m in MERGE_METHODS
                              if allowed and m not in allowed and m not in dict(got.refused_methods)))
        elif kind == "required_status_checks":
            got = replace(got, contexts=got.contexts | {c["context"] for c in params.get("required_status_checks")
                                                        or () if c.get("context")})
        elif kind == "required_linear_history":
            got = replace(got, linear_history=True)
        elif kind == "merge_queue":
            got = replace(got, merge_queue=True, queue_method=queue_method(params.get("merge_method")))
    return got
