"""The GitHub forge: pull requests through github3.py, pushes through :mod:`bot.workspace.remotes` with the token.

Works against github.com and GitHub Enterprise Server (``base_url``). Every verb
is idempotent (see :mod:`infrarsi.seams.forge`): ``ensure_pr`` looks the head branch
up before it opens anything and only sends the fields that differ. What
github3.py lacks — opening a draft, a merge that returns its commit — goes
through the same rate-limited session (:mod:`bot.forges.github_api`).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import github3
import github3.exceptions

from bot.workspace.naming import VERIFY_CONTEXT  # the bot's own status: posted after the checks are read
from bot.workspace.errors import RemoteError
from bot.workspace.refs import branch_tip, remote_url
from bot.workspace.remotes import Credentials, fetch, push, strip_auth as _strip_auth, token_credentials
from bot.forges.github_api import (
    BASE_URL_ENV,
    TOKEN_ENV,
    GitHubAPIError,
    GitHubClient,
    GitHubUnavailable,
    GitHubTarget,
    RetryPolicy,
    token_from_env,
)
from bot.forges import github_rules as rules_of
from infrarsi.seams.forge import (CheckState, EnsureAction, ForgeError, ForgeUnavailable, MergeMethod,
                                  MergeMethodRefused, MergeRules, PullRequest, PullRequestDraft, QueueEntry, Review,
                                  StatusState)

__all__ = ["GitHubForge", "forge_for_repo", "target_from_remote_url"]

MAX_AUTH_ATTEMPTS = 2  # libgit2 asks again after a 401; a bad token must fail, not loop
DELETED_USER = "(deleted account)"  # a review whose ``user`` is null: never a login, so it never counts


class GitHubForge:
    """A :class:`infrarsi.seams.forge.Forge` on one GitHub repository.

    ``push_url`` overrides the clone URL the API reports (a mirror, or a test
    server); teams are named ``org/team-slug`` and must belong to the repository's owner.
    """

    name = "github"

    def __init__(self, target: GitHubTarget, token: str, *, policy: RetryPolicy | None = None,
                 push_url: str | None = None) -> None:
        self.target = target
        self.client = GitHubClient(target, token, policy=policy)
        self._push_url = push_url
        self._repo: Any = None
        self._repo_data: dict[str, Any] | None = None

    # -- plumbing ------------------------------------------------------------------------------------------
    @property
    def repo(self) -> Any:
        """The github3 repository (fetched once)."""
        if self._repo is None:
            self._repo = self._call(self.client.gh.repository, self.target.owner, self.target.repo)
            if self._repo is None:
                raise ForgeError(f"{self.target.owner}/{self.target.repo}: repository not found, or the token "
                                 "cannot see it")
        return self._repo

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """github3 and raw-session failures as ForgeError, with GitHub's message; a 5xx or no answer (after the
        session's safe retries) as ForgeUnavailable, which may pass on retry."""
        try:
            return fn(*args, **kwargs)
        except github3.exceptions.GitHubError as e:
            detail = f" {e.errors}" if getattr(e, "errors", None) else ""
            what = f"GitHub: {e.code} {e.msg}{detail} ({getattr(fn, '__name__', fn)})"
            if isinstance(e, github3.exceptions.ServerError):
                raise ForgeUnavailable(f"{what}; retry later") from e
            raise ForgeError(what) from e
        except github3.exceptions.TransportError as e:
            raise ForgeUnavailable(f"GitHub did not answer ({e.exception!r}) ({getattr(fn, '__name__', fn)}); "
                                   "retry later") from e
        except GitHubUnavailable as e:
            raise ForgeUnavailable(str(e)) from e
        except GitHubAPIError as e:
            raise ForgeError(str(e)) from e

    def _raw(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._call(self.client.json, method, path, **kwargs)

    def _pages(self, path: str, *, key: str | None = None) -> list[Any]:
        """Every item of a paginated list (the client's one pagination helper; GitHub's default page of 30
        would hide reviews)."""
        return self._call(self.client.pages, path, key=key)

    def settings(self) -> dict[str, Any]:
        """The repository as the API returns it (fetched once): clone URL, visibility, allowed merge methods."""
        if self._repo_data is None:
            self._repo_data = self._raw("GET", "")
        return self._repo_data

    def _remote_url(self) -> str:
        return self._push_url or self.settings()["clone_url"]

    def _credentials(self, hint: str) -> Credentials:
        return Credentials(token_credentials(self.client.token), max_attempts=MAX_AUTH_ATTEMPTS, hint=hint)

    def _team_slug(self, team: str) -> str:
        org, sep, slug = team.partition("/")
        if not sep:
            return team
        if org.lower() != self.target.owner.lower():
            raise ForgeError(f"team {team!r}: reviews can only be requested from teams of {self.target.owner}")
        return slug

    def _to_pr(self, data: dict[str, Any]) -> PullRequest:
        state = "merged" if data.get("merged_at") else data["state"]
        reviewers = tuple(u["login"] for u in data.get("requested_reviewers") or ()) + tuple(
            f"{self.target.owner}/{t['slug']}" for t in data.get("requested_teams") or ())
        return PullRequest(number=data["number"], head=data["head"]["ref"], base=data["base"]["ref"],
                           title=data["title"], body=data.get("body") or "", state=state,
                           head_sha=data["head"]["sha"], url=data["html_url"], draft=bool(data.get("draft")),
                           labels=tuple(label["name"] for label in data.get("labels") or () if label),
                           requested_reviewers=reviewers)

    def _pull_data(self, number: int) -> dict[str, Any]:
        return self._raw("GET", f"/pulls/{number}")

    # -- Forge verbs ---------------------------------------------------------------------------------------
    def record_path(self, number: int) -> None:
        """None: the pull request lives on GitHub (its ``url``)."""
        return None

    def push(self, repo: Path, branch: str, *, force: bool = False) -> str:
        sha = branch_tip(repo, branch)
        if sha is None:
            raise ForgeError(f"{repo}: no local branch {branch!r} to push")
        url = self._remote_url()
        callbacks = self._credentials("the token is wrong or lacks contents:write on the repository")
        refname = f"refs/heads/{branch}"
        try:
            rejected = push(repo, url, [f"{'+' if force else ''}{refname}:{refname}"], callbacks=callbacks)
        except RemoteError as e:
            if callbacks.attempts > callbacks.max_attempts:
                raise ForgeError(f"push of {branch} to {_strip_auth(url)}: authentication failed ({e})") from e
            raise ForgeError(f"push of {refname} to {_strip_auth(url)} failed: {e}") from e
        if refname in rejected:
            raise ForgeError(f"{_strip_auth(url)} rejected {refname}: {rejected[refname]}")
        return sha

    def find_pr(self, head: str) -> PullRequest | None:
        found = self._call(lambda: [p.as_dict() for p in self.repo.pull_requests(
            state="all", head=f"{self.target.owner}:{head}", sort="created", direction="desc")])
        found = [p for p in found if p["head"]["ref"] == head]
        if not found:
            return None
        found.sort(key=lambda p: (p["state"] != "open", -p["number"]))
        return self._to_pr(found[0])

    def get_pr(self, number: int) -> PullRequest:
        return self._to_pr(self._pull_data(number))

    def ensure_pr(self, draft: PullRequestDraft, *, reopen: bool = False) -> tuple[PullRequest, EnsureAction]:
        existing = self.find_pr(draft.head)
        if existing is None:
            try:
                return self._open(draft), "created"
            except ForgeError as e:  # another bot (or a lagging search) opened it meanwhile: converge on that one
                if "already exists" not in str(e):
                    raise
                existing = self.find_pr(draft.head)
                if existing is None:
                    raise
        if existing.state != "open" and not (reopen and existing.state == "closed"):
            return existing, "closed"
        changes: dict[str, Any] = {}
        if existing.title != draft.title:
            changes["title"] = draft.title
        if existing.body != draft.body:
            changes["body"] = draft.body
        if existing.state == "closed":
            try:  # GitHub refuses (422) once the head branch was force-pushed or recreated since the close
                self._raw("PATCH", f"/pulls/{existing.number}", json={"state": "open"})
            except ForgeError as exc:
                if "422" not in str(exc):
                    raise
                return self._open(draft), "created"  # the caller sees a new number: it says so
        if existing.base != draft.base:
            changes["base"] = draft.base
        have = {label.lower() for label in existing.labels}  # GitHub's label names ignore case
        missing_labels = [label for label in draft.labels if label.lower() not in have]  # never removed
        if not changes and not missing_labels:
            return (self.get_pr(existing.number), "updated") if existing.state == "closed" else (existing,
                                                                                                "unchanged")
        if changes:
            pull = self._call(self.repo.pull_request, existing.number)
            if not self._call(pull.update, **changes):
                raise ForgeError(f"GitHub refused to update pull request #{existing.number}")
        if missing_labels:
            issue = self._call(self.repo.issue, existing.number)
            self._call(issue.add_labels, *missing_labels)
        return self._to_pr(self._pull_data(existing.number)), "updated"

    def _open(self, draft: PullRequestDraft) -> PullRequest:
        if draft.draft:  # github3.py's create_pull has no draft flag
            data = self._raw("POST", "/pulls", json={"title": draft.title, "head": draft.head, "base": draft.base,
                                                     "body": draft.body, "draft": True})
            number = data["number"]
        else:
            pull = self._call(self.repo.create_pull, draft.title, draft.base, draft.head, draft.body)
            if pull is None:
                raise ForgeError(f"GitHub did not open a pull request for {draft.head}")
            number = pull.number
        if draft.labels:
            issue = self._call(self.repo.issue, number)
            self._call(issue.add_labels, *draft.labels)
        return self._to_pr(self._pull_data(number))

    def ensure_comment(self, number: int, marker: str, body: str) -> None:
        if marker not in body:
            raise ValueError("the comment body must contain its marker, or the next call cannot find it")
        for comment in self._pages(f"/issues/{number}/comments"):  # raw: a deleted author's comment has user null
            if marker in (comment.get("body") or ""):
                if comment["body"] != body:
                    self._raw("PATCH", f"/issues/comments/{comment['id']}", json={"body": body})
                return
        self._raw("POST", f"/issues/{number}/comments", json={"body": body})

    def request_review(self, number: int, users: tuple[str, ...], teams: tuple[str, ...] = ()) -> None:
        current = self._to_pr(self._pull_data(number))
        reviewed = {r.login.lower() for r in self.reviews(number)
                    if r.commit_sha == current.head_sha and r.state != "PENDING"}  # already given on this head
        wanted_users = [u for u in users if u not in current.requested_reviewers and u.lower() not in reviewed]
        wanted_teams = [self._team_slug(t) for t in teams if t not in current.requested_reviewers]
        if not wanted_users and not wanted_teams:
            return
        pull = self._call(self.repo.pull_request, number)
        self._call(pull.create_review_requests, reviewers=wanted_users or None,
                   team_reviewers=wanted_teams or None)

    def reviews(self, number: int) -> tuple[Review, ...]:
        """Read raw, not through github3.py: a deleted account's review has ``user: null`` (and a pending
        one no ``submitted_at``), which github3.py cannot hold."""
        out = []
        for r in self._pages(f"/pulls/{number}/reviews"):
            user = r.get("user") or {}
            submitted = r.get("submitted_at")
            out.append(Review(login=user.get("login") or DELETED_USER, state=r.get("state") or "COMMENTED",
                              commit_sha=r.get("commit_id") or "",
                              submitted_at=datetime.fromisoformat(submitted.replace("Z", "+00:00")).timestamp()
                              if submitted else 0.0))
        return tuple(sorted(out, key=lambda r: r.submitted_at))

    def merge(self, number: int, *, expected_head_sha: str, message: str, method: MergeMethod = "merge") -> str:
        title, _, rest = message.partition("\n")
        try:
            data = self.client.json("PUT", f"/pulls/{number}/merge", json={
                "sha": expected_head_sha, "merge_method": method, "commit_title": title,
                "commit_message": rest.strip()})
        except GitHubAPIError as exc:
            if rules_of.method_refused(exc.status, exc.message):
                raise MergeMethodRefused(method, f"GitHub: {exc.status} {' '.join(exc.message.split())}") from exc
            raise (ForgeUnavailable if isinstance(exc, GitHubUnavailable) else ForgeError)(str(exc)) from exc
        if not data or not data.get("merged"):
            raise ForgeError(f"pull request #{number} was not merged: {data}")
        return str(data["sha"])

    def enqueue(self, pr: PullRequest, *, expected_head_sha: str) -> QueueEntry:
        """GraphQL's ``enqueuePullRequest`` (REST has no merge-queue verb), after reading whether the pull
        request is queued already: a rerun of promote finds its entry instead of queueing twice."""
        found = self._graphql(rules_of.QUEUE_ENTRY, number=pr.number).get("repository", {}).get("pullRequest")
        if not found:
            raise ForgeError(f"pull request #{pr.number}: GitHub's GraphQL API does not show it")
        entry = found.get("mergeQueueEntry")
        if entry is None:
            if found.get("headRefOid") != expected_head_sha:
                raise ForgeError(f"pull request #{pr.number}: head is {str(found.get('headRefOid'))[:10]}, not "
                                 f"the expected {expected_head_sha[:10]}; someone pushed since it was checked")
            entry = self._graphql(rules_of.ENQUEUE, pullRequestId=found["id"], expectedHeadOid=expected_head_sha,
                                  repository=False)["enqueuePullRequest"]["mergeQueueEntry"]
        return QueueEntry(number=pr.number, position=entry.get("position"), state=str(entry.get("state")))

    def _graphql(self, query: str, *, repository: bool = True, **variables: Any) -> dict[str, Any]:
        if repository:
            variables = {"owner": self.target.owner, "name": self.target.repo, **variables}
        return self._call(self.client.graphql, query, variables)

    def set_status(self, sha: str, *, context: str, state: StatusState, description: str) -> None:
        self._raw("POST", f"/statuses/{sha}", json={"state": state, "description": description[:140],
                                                    "context": context})

    def fetch(self, repo: Path, branches: tuple[str, ...], *, remote: str = "origin") -> dict[str, str]:
        url = self._remote_url()
        hint = "the token is wrong or lacks contents:read on the repository"
        try:
            heads = listed_heads(repo, url, self._credentials(hint))
            found = {b: heads[f"refs/heads/{b}"] for b in branches if f"refs/heads/{b}" in heads}
            if found:
                fetch(repo, url, [f"+refs/heads/{b}:refs/remotes/{remote}/{b}" for b in found],
                      callbacks=self._credentials(hint))
        except RemoteError as exc:
            raise ForgeError(f"fetch of {', '.join(branches)} from {_strip_auth(url)} failed: {exc}") from exc
        return found

    def blob_url(self, ref: str, path: str) -> str:
        return f"{self.settings()['html_url']}/blob/{ref}/{path}"  # GitHub resolves a ref with slashes here

    def team_member(self, team: str, login: str) -> bool:
        org, sep, slug = team.partition("/")
        if not sep:
            org, slug = self.target.owner, team
        try:
            data = self._call(self.client.json, "GET",
                              f"{self.client.api_root}/orgs/{org}/teams/{slug}/memberships/{login}")
        except ForgeError as exc:
            if " 404 " in str(exc):
                return False
            raise ForgeError(f"team {team}: cannot read the membership of {login} ({exc}); the token needs "
                             "members:read on the organization") from exc
        return bool(data) and data.get("state") == "active"

    def merge_rules(self, pr: PullRequest) -> MergeRules:
        """Read afresh (settings change), each source on its own (:mod:`bot.forges.github_rules`); a source the
        token may not read is named in ``unread`` with GitHub's answer."""
        unread: list[str] = []
        self._repo_data = repository = self._raw("GET", "")
        refused = rules_of.from_settings(repository)
        if refused is None:
            unread.append("which merge methods the repository allows (GitHub left allow_merge_commit, "
                          "allow_squash_merge and allow_rebase_merge out for this token): a refused method is "
                          "learnt from GitHub's 405 at the merge")
        branch = self._raw("GET", f"/branches/{pr.base}") or {}
        got = rules_of.Protection(refused_methods=refused or (), contexts=rules_of.required_contexts(
            (branch.get("protection") or {}).get("required_status_checks") or {}))
        if branch.get("protected"):
            protection, why = self._readable(f"/branches/{pr.base}/protection")
            if protection is None:
                unread.append(f"{pr.base}'s branch protection ({why}; the token needs Administration: read): "
                              "required reviews, code-owner reviews and linear history set there are not checked "
                              "before re-verifying, GitHub enforces them at the merge")
            else:
                got = rules_of.from_protection(got, protection)
        rules, why = self._readable(f"/rules/branches/{pr.base}", pages=True)
        if rules is None:
            unread.append(f"the rulesets that apply to {pr.base} ({why})")
        else:
            got = rules_of.from_rules(got, rules)
        if not got.merge_queue:  # a queue set in classic branch protection shows only in GraphQL
            try:
                queue = self._graphql(rules_of.MERGE_QUEUE, branch=pr.base).get("repository", {}).get("mergeQueue")
            except ForgeError as exc:
                unread.append(f"whether {pr.base} merges through a merge queue ({exc})")
            else:
                if queue:
                    got = replace(got, merge_queue=True, queue_method=rules_of.queue_method(
                        (queue.get("configuration") or {}).get("mergeMethod")))
        return MergeRules(base=pr.base, protected=bool(branch.get("protected")), refused_methods=got.refused_methods,
                          required_checks=self._check_states(pr.head_sha, got.contexts - {VERIFY_CONTEXT}),
                          required_approvals=got.required_approvals, code_owner_reviews=got.code_owner_reviews,
                          linear_history=got.linear_history, merge_queue=got.merge_queue,
                          queue_method=got.queue_method, unread=tuple(unread))

    def _readable(self, path: str, *, pages: bool = False) -> tuple[Any, str | None]:
        """(the answer, None), or (None, GitHub's reason) when the token may not read ``path`` (403, 404)."""
        try:
            return (self._pages(path) if pages else self._raw("GET", path)), None
        except ForgeError as exc:
            cause = exc.__cause__
            if isinstance(cause, GitHubAPIError) and cause.status in (403, 404):
                return None, f"{cause.status} {cause.message}"
            raise

    def _check_states(self, sha: str, contexts: frozenset[str]) -> tuple[CheckState, ...]:
        """Each required context's state on ``sha``: commit statuses and check runs (newest first), else missing."""
        if not contexts:
            return ()
        state: dict[str, str] = {}
        for s in self._pages(f"/commits/{sha}/status", key="statuses"):
            state.setdefault(s["context"], s["state"])  # newest first
        for run in self._pages(f"/commits/{sha}/check-runs", key="check_runs"):
            done = run.get("conclusion") if run.get("status") == "completed" else None
            state.setdefault(run["name"], "success" if done in ("success", "neutral", "skipped")
                             else (done or "pending"))
        return tuple(CheckState(context=c, state=state.get(c, "missing")) for c in sorted(contexts))


def listed_heads(repo: Path, url: str, callbacks: Credentials) -> dict[str, str]:
    """The remote's refs (``git ls-remote``) with ``callbacks``; RemoteError when refused."""
    from bot.workspace.remotes import list_heads

    return list_heads(repo, url, callbacks=callbacks)


REPOSITORY_ENV = "INFRARSI_GITHUB_REPOSITORY"  # OWNER/REPO, when the remote's URL does not say it
RETRIES_ENV = "INFRARSI_GITHUB_RETRIES"  # retries of a transient failure per request (default 4; 0: none)
_SCP = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>[^/].*)$")  # git@host:owner/repo.git


def target_from_remote_url(url: str, *, base_url: str | None = None) -> tuple[GitHubTarget, str | None]:
    """The repository a git remote URL names, and the https URL to push to (None for ssh remotes).

    ``github.com`` means the public API; any other host is GitHub Enterprise Server at
    ``<scheme>://<host>`` unless ``base_url`` says otherwise.
    """
    scheme, sep, rest = url.partition("://")
    if sep:
        hostpart, _, path = rest.partition("/")
        host = hostpart.rsplit("@", 1)[-1]
        push_url = f"{scheme}://{host}/{path}" if scheme in ("http", "https") else None
    else:
        m = _SCP.match(url)
        if not m:
            raise ForgeError(f"cannot tell the GitHub repository from the remote URL {url!r}; set {REPOSITORY_ENV}")
        scheme, host, path, push_url = "https", m["host"], m["path"], None
    parts = [p for p in path.removesuffix("/").removesuffix(".git").split("/") if p]
    if len(parts) < 2:
        raise ForgeError(f"cannot tell OWNER/REPO from the remote URL {url!r}; set {REPOSITORY_ENV}")
    if base_url is None and host.lower() not in ("github.com", "www.github.com"):
        base_url = f"{'https' if scheme not in ('http', 'https') else scheme}://{host}"
    return GitHubTarget(owner=parts[-2], repo=parts[-1], base_url=base_url), push_url


def forge_for_repo(repo: Path, remote: str = "origin", *, environ: dict[str, str] | None = None,
                   policy: RetryPolicy | None = None) -> GitHubForge:
    """The registry's factory: the GitHub repository behind ``repo``'s ``remote``, the token from the environment.

    Token: the first of ``INFRARSI_GITHUB_TOKEN``, ``GITHUB_TOKEN``, ``GH_TOKEN``. Enterprise: the remote's host,
    or ``INFRARSI_GITHUB_URL`` (the web root, e.g. https://github.example.com). ``INFRARSI_GITHUB_REPOSITORY``
    (OWNER/REPO) overrides what the remote URL says; ``INFRARSI_GITHUB_RETRIES`` how often a 5xx or a dropped
    connection is retried where that is safe.
    """
    env = dict(os.environ if environ is None else environ)
    token = token_from_env(env)
    if not token:
        raise ForgeError(f"the GitHub forge needs a token in one of {', '.join(TOKEN_ENV)}")
    if policy is None and env.get(RETRIES_ENV):
        if not env[RETRIES_ENV].isdigit():
            raise ForgeError(f"{RETRIES_ENV}: expected a whole number of retries (0 or more), got {env[RETRIES_ENV]!r}")
        policy = RetryPolicy(transient_retries=int(env[RETRIES_ENV]))
    base_url = env.get(BASE_URL_ENV) or None
    url = remote_url(repo, remote)
    if env.get(REPOSITORY_ENV):
        try:
            target = GitHubTarget.parse(env[REPOSITORY_ENV], base_url)
        except ValueError as exc:
            raise ForgeError(f"{REPOSITORY_ENV}: {exc}") from None
        try:  # a path or an unrecognised remote: push to the clone URL the API reports
            push_url = target_from_remote_url(url, base_url=base_url)[1] if url else None
        except ForgeError:
            push_url = None
    elif url:
        target, push_url = target_from_remote_url(url, base_url=base_url)
    else:
        raise ForgeError(f"{repo}: no git remote {remote!r}; add one or set {REPOSITORY_ENV}")
    return GitHubForge(target, token, policy=policy, push_url=push_url)
