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
from datetime import datetime
from pathlib import Path
from typing import Any

import github3
import github3.exceptions

from bot.workspace.errors import RemoteError
from bot.workspace.refs import branch_tip, remote_url
from bot.workspace.remotes import Credentials, fetch, push, strip_auth as _strip_auth, token_credentials
from bot.forges.github_api import (
    BASE_URL_ENV,
    TOKEN_ENV,
    GitHubAPIError,
    GitHubClient,
    GitHubTarget,
    RateLimitPolicy,
    token_from_env,
)
from infrarsi.seams.forge import EnsureAction, ForgeError, PullRequest, PullRequestDraft, Review, StatusState

__all__ = ["GitHubForge", "forge_for_repo", "target_from_remote_url"]

MAX_AUTH_ATTEMPTS = 2  # libgit2 asks again after a 401; a bad token must fail, not loop
DELETED_USER = "(deleted account)"  # a review whose ``user`` is null: never a login, so it never counts
# The merge methods in the order the bot prefers them: a merge commit keeps the approved commit itself in
# the base's history; squash and rebase of the single promotion commit on an unmoved base keep its tree.
MERGE_METHODS = (("merge", "allow_merge_commit"), ("squash", "allow_squash_merge"), ("rebase", "allow_rebase_merge"))
VERIFY_CONTEXT = "infrarsi/verify"  # the bot's own status: posted after the checks are read


class GitHubForge:
    """A :class:`infrarsi.seams.forge.Forge` on one GitHub repository.

    ``push_url`` overrides the clone URL the API reports (a mirror, or a test
    server); teams are named ``org/team-slug`` and must belong to the repository's owner.
    """

    name = "github"

    def __init__(self, target: GitHubTarget, token: str, *, policy: RateLimitPolicy | None = None,
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
        """github3 and raw-session failures as ForgeError, with GitHub's message."""
        try:
            return fn(*args, **kwargs)
        except github3.exceptions.GitHubError as e:
            detail = f" {e.errors}" if getattr(e, "errors", None) else ""
            raise ForgeError(f"GitHub: {e.code} {e.msg}{detail} ({getattr(fn, '__name__', fn)})") from e
        except GitHubAPIError as e:
            raise ForgeError(str(e)) from e

    def _raw(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._call(self.client.json, method, path, **kwargs)

    def _pages(self, path: str) -> list[Any]:
        """Every item of a paginated list (``per_page=100``; GitHub's default of 30 would hide reviews)."""
        out: list[Any] = []
        page = 1
        while True:
            items = self._raw("GET", path, params={"per_page": 100, "page": page}) or []
            out += items
            if len(items) < 100:
                return out
            page += 1

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

    def merge_method(self) -> str:
        """The first of merge, squash, rebase the repository allows (its settings; GitHub's default is all)."""
        data = self._repo_data = self._raw("GET", "")  # read afresh at merge time: settings change
        for method, key in MERGE_METHODS:
            if data.get(key, True):
                return method
        raise ForgeError(f"{self.target.owner}/{self.target.repo} allows no merge method")

    def merge(self, number: int, *, expected_head_sha: str, message: str) -> str:
        title, _, rest = message.partition("\n")
        data = self._raw("PUT", f"/pulls/{number}/merge",
                         json={"sha": expected_head_sha, "merge_method": self.merge_method(), "commit_title": title,
                               "commit_message": rest.strip()})
        if not data or not data.get("merged"):
            raise ForgeError(f"pull request #{number} was not merged: {data}")
        return str(data["sha"])

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

    def merge_blockers(self, pr: PullRequest) -> tuple[str, ...]:
        out = ["it is a draft: mark it ready for review"] if pr.draft else []
        branch = self._raw("GET", f"/branches/{pr.base}")
        rules = ((branch or {}).get("protection") or {}).get("required_status_checks") or {}
        required = {c for c in rules.get("contexts") or () if c != VERIFY_CONTEXT} | {
            c["context"] for c in rules.get("checks") or () if c.get("context") and c["context"] != VERIFY_CONTEXT}
        if not required:
            return tuple(out)
        state: dict[str, str] = {}
        combined = self._raw("GET", f"/commits/{pr.head_sha}/status", params={"per_page": 100}) or {}
        for s in combined.get("statuses") or ():
            state.setdefault(s["context"], s["state"])  # newest first
        runs = self._raw("GET", f"/commits/{pr.head_sha}/check-runs", params={"per_page": 100}) or {}
        for run in runs.get("check_runs") or ():
            done = run.get("conclusion") if run.get("status") == "completed" else None
            state.setdefault(run["name"], "success" if done in ("success", "neutral", "skipped")
                             else (done or "pending"))
        for context in sorted(required):
            got = state.get(context, "missing")
            if got != "success":
                out.append(f"the required check {context!r} is {got} on head {pr.head_sha[:10]}")
        return tuple(out)


def listed_heads(repo: Path, url: str, callbacks: Credentials) -> dict[str, str]:
    """The remote's refs (``git ls-remote``) with ``callbacks``; RemoteError when refused."""
    from bot.workspace.remotes import list_heads

    return list_heads(repo, url, callbacks=callbacks)


REPOSITORY_ENV = "INFRARSI_GITHUB_REPOSITORY"  # OWNER/REPO, when the remote's URL does not say it
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
                   policy: RateLimitPolicy | None = None) -> GitHubForge:
    """The registry's factory: the GitHub repository behind ``repo``'s ``remote``, the token from the environment.

    Token: the first of ``INFRARSI_GITHUB_TOKEN``, ``GITHUB_TOKEN``, ``GH_TOKEN``. Enterprise: the remote's host,
    or ``INFRARSI_GITHUB_URL`` (the web root, e.g. https://github.example.com). ``INFRARSI_GITHUB_REPOSITORY``
    (OWNER/REPO) overrides what the remote URL says.
    """
    env = dict(os.environ if environ is None else environ)
    token = token_from_env(env)
    if not token:
        raise ForgeError(f"the GitHub forge needs a token in one of {', '.join(TOKEN_ENV)}")
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
