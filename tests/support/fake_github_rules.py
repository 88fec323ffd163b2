"""Branch protection, rulesets and merge queues for the GitHub stand-in, in the shapes GitHub documents.

``FakeGitHub`` mixes this in: a test protects a branch (:meth:`protect`), adds
ruleset rules (:meth:`add_rule`, :meth:`add_merge_queue_rule`) or takes the
administer permission away (``can_administer``), and the server answers
``GET /branches/{b}/protection``, ``GET /rules/branches/{b}`` and the GraphQL
``mergeQueue``/``enqueuePullRequest`` operations as GitHub does
(``docs.github.com/rest/branches/branch-protection``, ``/rest/repos/rules``,
``/graphql/reference/mutations#enqueuepullrequest``), and enforces the rules on
a merge with GitHub's 405 answers.
"""

from __future__ import annotations

import re
from typing import Any


class BranchRules:
    """State and routes of branch protection; the host class provides ``state``, ``branch()`` and URLs."""

    owner: str
    name: str
    url: str
    repo_api: str
    state: Any
    required_checks: dict[str, list[str]]
    can_administer: bool
    protection_denied: int
    protections: dict[str, dict[str, Any]]
    rules: dict[str, list[dict[str, Any]]]
    queued: dict[str, list[int]]

    def branch(self, name: str) -> str | None: ...

    def protect(self, branch: str, *, checks: tuple[str, ...] = (), approvals: int = 0, code_owners: bool = False,
                linear: bool = False, merge_queue: str | None = None) -> None:
        """Classic branch protection on ``branch``. A merge queue set here (``MERGE``/``SQUASH``/``REBASE``) is not
        in the REST protection object, as on GitHub: only GraphQL's ``mergeQueue(branch:)`` shows it."""
        self.protections[branch] = {"checks": list(checks), "approvals": approvals, "code_owners": code_owners,
                                    "linear": linear, "merge_queue": merge_queue}

    def add_rule(self, branch: str, kind: str, parameters: dict[str, Any] | None = None, *,
                 ruleset_id: int = 7) -> None:
        """An active rule of a repository ruleset that applies to ``branch`` (``GET /rules/branches/{b}``)."""
        rule: dict[str, Any] = {"type": kind, "ruleset_source_type": "Repository",
                                "ruleset_source": f"{self.owner}/{self.name}", "ruleset_id": ruleset_id}
        if parameters is not None:
            rule["parameters"] = parameters
        self.rules.setdefault(branch, []).append(rule)

    def add_merge_queue_rule(self, branch: str, method: str = "SQUASH") -> None:
        """A ruleset's ``merge_queue`` rule with GitHub's documented parameters."""
        self.add_rule(branch, "merge_queue", {
            "check_response_timeout_minutes": 60, "grouping_strategy": "ALLGREEN", "max_entries_to_build": 5,
            "max_entries_to_merge": 5, "merge_method": method, "min_entries_to_merge": 1,
            "min_entries_to_merge_wait_minutes": 5})

    def _effective(self, branch: str) -> dict[str, Any]:
        """What GitHub enforces on a merge into ``branch``: classic protection and rulesets together."""
        p = self.protections.get(branch, {})
        out = {"checks": list(self.required_checks.get(branch, [])) + list(p.get("checks", [])),
               "approvals": p.get("approvals", 0), "linear": p.get("linear", False), "queue": p.get("merge_queue")}
        for rule in self.rules.get(branch, []):
            params = rule.get("parameters") or {}
            if rule["type"] == "pull_request":
                out["approvals"] = max(out["approvals"], params.get("required_approving_review_count", 0))
            elif rule["type"] == "required_status_checks":
                out["checks"] += [c["context"] for c in params.get("required_status_checks", [])]
            elif rule["type"] == "required_linear_history":
                out["linear"] = True
            elif rule["type"] == "merge_queue":
                out["queue"] = params.get("merge_method", "MERGE")
        return out

    def _approving(self, number: int) -> list[str]:
        """Reviewers whose latest deciding review approves (GitHub's count toward required reviews)."""
        latest: dict[str, str] = {}
        for r in sorted(self.state.reviews.get(number, []), key=lambda r: r["_submitted"]):
            if r["user"] and r["state"] in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
                latest[r["user"]["login"]] = r["state"]
        return [login for login, state in latest.items() if state == "APPROVED"]

    def _protected(self, branch: str) -> bool:
        return bool(self.required_checks.get(branch)) or branch in self.protections

    def _classic_checks(self, branch: str) -> list[str]:
        return list(self.required_checks.get(branch, [])) + list(self.protections.get(branch, {}).get("checks", []))

    def _get_protection(self, m: re.Match[str], q: Any, b: Any) -> Any:
        """``GET /branches/{b}/protection`` as documented (``docs.github.com/rest/branches/branch-protection``)."""
        branch = m["branch"]
        if not self.can_administer:
            message = "Resource not accessible by personal access token" if self.protection_denied == 403 \
                else "Not Found"
            return self.protection_denied, {}, {"message": message, "documentation_url":
                                                "https://docs.github.com/rest/branches/branch-protection"}
        if not self._protected(branch):
            return 404, {}, {"message": "Branch not protected"}
        p = self.protections.get(branch, {})
        api = f"{self.repo_api}/branches/{branch}/protection"
        checks = self._classic_checks(branch)
        out: dict[str, Any] = {"url": api}
        if checks:
            out["required_status_checks"] = {
                "url": api + "/required_status_checks", "strict": False, "contexts": checks,
                "contexts_url": api + "/required_status_checks/contexts",
                "checks": [{"context": c, "app_id": None} for c in checks]}
        if p.get("approvals") or p.get("code_owners"):
            out["required_pull_request_reviews"] = {
                "url": api + "/required_pull_request_reviews", "dismiss_stale_reviews": False,
                "require_code_owner_reviews": bool(p.get("code_owners")),
                "required_approving_review_count": p.get("approvals", 0), "require_last_push_approval": False}
        out.update({
            "required_signatures": {"url": api + "/required_signatures", "enabled": False},
            "enforce_admins": {"url": api + "/enforce_admins", "enabled": False},
            "required_linear_history": {"enabled": bool(p.get("linear"))}, "allow_force_pushes": {"enabled": False},
            "allow_deletions": {"enabled": False}, "block_creations": {"enabled": False},
            "required_conversation_resolution": {"enabled": False}, "lock_branch": {"enabled": False},
            "allow_fork_syncing": {"enabled": False}})
        return 200, {}, out

    def _branch_rules(self, m: re.Match[str], q: Any, b: Any) -> Any:
        """``GET /rules/branches/{b}``: every active rule that applies, whatever the permission beyond Metadata."""
        page, per_page = int(q.get("page", ["1"])[0]), int(q.get("per_page", ["30"])[0])
        rules = self.rules.get(m["branch"], [])
        return 200, {}, rules[(page - 1) * per_page:page * per_page]

    def _graphql(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        """The three GraphQL operations the bot sends, answered in GraphQL's shape (refusals are 200 + errors)."""
        query, variables = b.get("query", ""), b.get("variables") or {}
        if "enqueuePullRequest" in query:
            return self._enqueue(variables)
        if "pullRequest(number:" in query:
            pr = self.state.pulls.get(int(variables["number"]))
            if pr is None:
                return 200, {}, {"data": {"repository": {"pullRequest": None}}, "errors": [
                    {"type": "NOT_FOUND", "path": ["repository", "pullRequest"],
                     "message": f"Could not resolve to a PullRequest with the number of {variables['number']}."}]}
            return 200, {}, {"data": {"repository": {"pullRequest": {
                "id": f"PR_{pr['number']}", "headRefOid": self.branch(pr["head"]) or pr["head_sha"],
                "mergeQueueEntry": self._queue_entry(pr)}}}}
        if "mergeQueue(branch:" in query:
            method = self._effective(variables["branch"])["queue"]
            queue = {"url": f"{self.url}/{self.owner}/{self.name}/queue/{variables['branch']}",
                     "configuration": {"mergeMethod": method}} if method else None
            return 200, {}, {"data": {"repository": {"mergeQueue": queue}}}
        return 200, {}, {"errors": [{"message": "the stand-in does not answer this query"}]}

    def _queue_entry(self, pr: dict[str, Any]) -> dict[str, Any] | None:
        queue = self.queued.get(pr["base"], [])
        return {"position": queue.index(pr["number"]) + 1, "state": "QUEUED"} if pr["number"] in queue else None

    def _enqueue(self, variables: dict[str, Any]) -> Any:
        def refused(message: str) -> Any:
            return 200, {}, {"data": {"enqueuePullRequest": None}, "errors": [
                {"type": "UNPROCESSABLE", "path": ["enqueuePullRequest"], "message": message}]}

        number = int(str(variables.get("pullRequestId", "")).removeprefix("PR_") or 0)
        pr = self.state.pulls.get(number)
        if pr is None:
            return refused(f"Could not resolve to a node with the global id of '{variables.get('pullRequestId')}'")
        if not self._effective(pr["base"])["queue"]:
            return refused(f"Pull request is not in a mergeable state: {pr['base']} does not have a merge queue")
        if variables.get("expectedHeadOid") and variables["expectedHeadOid"] != self.branch(pr["head"]):
            return refused("Expected head OID does not match the pull request's head")
        if len(self._approving(number)) < self._effective(pr["base"])["approvals"]:
            return refused("Pull request is not mergeable: review required")
        queue = self.queued.setdefault(pr["base"], [])
        if number not in queue:
            queue.append(number)
        return 200, {}, {"data": {"enqueuePullRequest": {"mergeQueueEntry": self._queue_entry(pr)}}}
