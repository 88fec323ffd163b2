"""A local HTTP server speaking the slice of GitHub's REST API the bot uses, plus git smart HTTP.

It keeps real state (pull requests, issue comments, reviews, statuses, Actions
runs and their artifacts) and a real bare repository served by
``git http-backend``, and records every API request so that tests assert on the
payloads the bot sent. Objects carry the keys github3.py reads, shaped as
GitHub returns them (``docs.github.com/rest``); it is not a mock of the bot's
own assumptions. Served under ``/api/v3`` as GitHub Enterprise Server is, so
``github3.GitHubEnterprise(url)`` talks to it unchanged.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pygit2

from tests.support.fake_github_rules import BranchRules

TOKEN = "test-token-not-a-secret"
MERGER = pygit2.Signature("GitHub", "noreply@github.com")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Recorded:
    method: str
    path: str  # without /api/v3
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Injected:
    """A canned answer served instead of the real one (rate limits, outages); status 0 drops the connection
    without an answer, as a dying proxy does."""

    method: str
    pattern: str
    status: int
    headers: dict[str, str]
    body: Any
    times: int = 1


@dataclass
class RunPlan:
    """What a dispatched workflow run does: how long it waits, how it ends, what it uploads."""

    conclusion: str = "success"  # success | failure | cancelled | timed_out
    queued_polls: int = 1  # GETs of the run answered "queued" before it starts
    running_polls: int = 1  # then "in_progress" before it completes
    duration_s: float = 30.0  # run_started_at -> updated_at
    artifact: dict[str, bytes] | None = None  # file name -> content, zipped as the run's artifact
    artifact_name: str | None = None  # default: infrarsi-trial-<dispatch_id>
    # A runner's real work (TrialWorkflowRunner): started on its own thread at dispatch, the run is
    # in_progress while it works and completed when it returns (conclusion, artifact files); the polls,
    # conclusion, duration and artifact above are then what it did, not a script.
    job: Callable[[], tuple[str, dict[str, bytes]]] | None = None


@dataclass
class _Run:
    id: int
    workflow: str
    ref: str
    inputs: dict[str, Any]
    plan: RunPlan
    created: float
    polls: int = 0
    status: str = "queued"
    conclusion: str | None = None
    started: float | None = None
    artifact_id: int | None = None


@dataclass
class State:
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    reviews: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    runs: dict[int, _Run] = field(default_factory=dict)
    check_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # head sha -> check runs
    artifacts: dict[int, bytes] = field(default_factory=dict)
    next_id: int = 100
    running_now: int = 0
    max_running: int = 0


class FakeGitHub(BranchRules):
    """Start with :meth:`start`; ``url`` is the web root, ``api`` the API root (``url + /api/v3``)."""

    def __init__(self, root: Path, *, owner: str = "acme", name: str = "trainer", token: str = TOKEN,
                 collaborators: tuple[str, ...] = ("alice", "bob", "infrarsi-bot")) -> None:
        self.root = root
        self.owner, self.name, self.token = owner, name, token
        self.collaborators = collaborators
        self.requests: list[Recorded] = []
        self.injected: list[Injected] = []
        self.state = State()
        self.git_auth_failures = 0
        self.run_details = True  # False: answer dispatches 204 like GitHub Enterprise Server before 2026
        self.private = True  # a private repository: git fetches need the token too
        self.git_token: str | None = None  # when set, git takes only this token (the API token lacks contents)
        self.merge_methods = {"merge", "squash", "rebase"}  # allow_merge_commit / _squash_ / _rebase_merge
        # False: a token with less permission. GitHub then leaves the allow_* keys out of the
        # repository object and answers GET .../branches/{b}/protection with ``protection_denied`` (403 for
        # fine-grained and app tokens, 404 for a classic token); rulesets stay readable (Metadata: read).
        self.can_administer = True
        self.protection_denied = 403
        self.teams: dict[str, set[str]] = {}  # team slug -> active members (GET .../memberships/{user})
        self.required_checks: dict[str, list[str]] = {}  # branch -> required status check contexts
        self.protections: dict[str, dict[str, Any]] = {}  # branch -> classic branch protection (see protect())
        self.rules: dict[str, list[dict[str, Any]]] = {}  # branch -> active ruleset rules (see add_rule())
        self.queued: dict[str, list[int]] = {}  # base branch -> pull requests in its merge queue, in order
        self.before_merge: Callable[[], None] | None = None  # runs as a merge arrives (someone else merging first)
        self.plan_for: Callable[[dict[str, Any]], RunPlan] = lambda inputs: RunPlan()
        self.lock = threading.RLock()
        self.bare = root / "git" / owner / f"{name}.git"
        pygit2.init_repository(str(self.bare), bare=True, initial_head="main")
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FakeGitHub:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def api(self) -> str:
        return self.url + "/api/v3"

    @property
    def clone_url(self) -> str:
        return f"{self.url}/git/{self.owner}/{self.name}.git"

    # -- test helpers --------------------------------------------------------------------------------
    def inject(self, method: str, pattern: str, status: int, *, headers: dict[str, str] | None = None,
               body: Any = None, times: int = 1) -> None:
        self.injected.append(Injected(method, pattern, status, headers or {}, body, times))

    def calls(self, method: str, pattern: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and re.fullmatch(pattern, r.path)]

    def branch(self, name: str) -> str | None:
        ref = pygit2.Repository(str(self.bare)).references.get(f"refs/heads/{name}")
        return str(ref.target) if ref is not None else None

    def add_review(self, number: int, login: str | None, state: str, commit_sha: str) -> None:
        """A review by ``login``; None is a since-deleted account (GitHub then answers ``"user": null``)."""
        with self.lock:
            reviews = self.state.reviews.setdefault(number, [])
            rid = self._id()
            reviews.append({
                "id": rid, "node_id": f"PRR_{rid}", "user": self.user(login) if login else None, "body": "",
                "body_html": "",
                "body_text": "", "state": state, "commit_id": commit_sha, "author_association": "COLLABORATOR",
                "html_url": f"{self.url}/{self.owner}/{self.name}/pull/{number}#pullrequestreview-{rid}",
                "pull_request_url": f"{self.repo_api}/pulls/{number}", "submitted_at": iso(time.time()),
                "_submitted": time.time(),
            })
            pr = self.state.pulls[number]
            pr["requested_reviewers"] = [u for u in pr["requested_reviewers"] if u["login"] != login]

    # -- shapes ----------------------------------------------------------------------------------------
    @property
    def repo_api(self) -> str:
        return f"{self.api}/repos/{self.owner}/{self.name}"

    def _id(self) -> int:
        self.state.next_id += 1
        return self.state.next_id

    def user(self, login: str) -> dict[str, Any]:
        base = f"{self.api}/users/{login}"
        return {"login": login, "id": abs(hash(login)) % 10**6, "node_id": f"U_{login}", "type": "User",
                "site_admin": False, "avatar_url": f"{self.url}/avatars/{login}", "gravatar_id": "",
                "url": base, "html_url": f"{self.url}/{login}", "events_url": base + "/events{/privacy}",
                "followers_url": base + "/followers", "following_url": base + "/following{/other_user}",
                "gists_url": base + "/gists{/gist_id}", "organizations_url": base + "/orgs",
                "received_events_url": base + "/received_events", "repos_url": base + "/repos",
                "starred_url": base + "/starred{/owner}{/repo}", "subscriptions_url": base + "/subscriptions"}

    def team(self, slug: str) -> dict[str, Any]:
        base = f"{self.api}/orgs/{self.owner}/teams/{slug}"
        return {"id": abs(hash(slug)) % 10**6, "node_id": f"T_{slug}", "name": slug, "slug": slug,
                "permission": "pull", "url": base, "members_url": base + "/members{/member}",
                "repositories_url": base + "/repos", "html_url": f"{self.url}/orgs/{self.owner}/teams/{slug}"}

    def repository(self) -> dict[str, Any]:
        api, web = self.repo_api, f"{self.url}/{self.owner}/{self.name}"
        urls = {k: f"{api}/{k.removesuffix('_url')}" for k in (
            "archive_url", "assignees_url", "blobs_url", "branches_url", "collaborators_url", "comments_url",
            "commits_url", "compare_url", "contents_url", "contributors_url", "deployments_url", "downloads_url",
            "events_url", "forks_url", "git_commits_url", "git_refs_url", "git_tags_url", "hooks_url",
            "issue_comment_url", "issue_events_url", "issues_url", "keys_url", "labels_url", "languages_url",
            "merges_url", "milestones_url", "notifications_url", "pulls_url", "releases_url", "stargazers_url",
            "statuses_url", "subscribers_url", "subscription_url", "tags_url", "teams_url", "trees_url")}
        return {**urls, "id": 4242, "node_id": "R_4242", "name": self.name, "full_name": f"{self.owner}/{self.name}",
                "owner": self.user(self.owner), "private": self.private, "html_url": web, "description": None,
                "visibility": "private" if self.private else "public",
                **({"allow_merge_commit": "merge" in self.merge_methods,
                    "allow_squash_merge": "squash" in self.merge_methods,
                    "allow_rebase_merge": "rebase" in self.merge_methods} if self.can_administer else {}),
                "fork": False, "url": api, "clone_url": self.clone_url, "git_url": self.clone_url,
                "ssh_url": f"git@127.0.0.1:{self.owner}/{self.name}.git", "svn_url": web, "mirror_url": None,
                "homepage": None, "language": "Python", "forks_count": 0, "stargazers_count": 0,
                "watchers_count": 0, "size": 1, "default_branch": "main", "open_issues_count": 0,
                "has_issues": True, "has_projects": False, "has_wiki": False, "has_pages": False,
                "has_downloads": False, "archived": False, "disabled": False, "pushed_at": iso(time.time()),
                "created_at": "2026-01-01T00:00:00Z", "updated_at": iso(time.time()), "network_count": 0,
                "subscribers_count": 0,
                "permissions": {"admin": self.can_administer, "maintain": self.can_administer, "push": True,
                                "triage": True, "pull": True}}

    def pull_json(self, pr: dict[str, Any]) -> dict[str, Any]:
        n = pr["number"]
        api = f"{self.repo_api}/pulls/{n}"
        head_sha = self.branch(pr["head"]) or pr["head_sha"]
        if pr["state"] == "open":
            pr["head_sha"] = head_sha
        repo = self.repository()

        def end(ref: str, sha: str) -> dict[str, Any]:
            return {"label": f"{self.owner}:{ref}", "ref": ref, "sha": sha, "user": self.user(self.owner),
                    "repo": repo}

        labels = [self.label(n_) for n_ in pr["labels"]]
        return {
            "url": api, "id": 9000 + n, "node_id": f"PR_{n}", "number": n, "state": pr["state"],
            "locked": False, "active_lock_reason": None, "title": pr["title"], "body": pr["body"],
            "body_html": None, "body_text": None, "user": self.user("infrarsi-bot"), "labels": labels,
            "html_url": f"{self.url}/{self.owner}/{self.name}/pull/{n}", "diff_url": f"{self.url}/pull/{n}.diff",
            "patch_url": f"{self.url}/pull/{n}.patch", "issue_url": f"{self.repo_api}/issues/{n}",
            "commits_url": api + "/commits", "review_comments_url": api + "/comments",
            "review_comment_url": f"{self.repo_api}/pulls/comments{{/number}}",
            "comments_url": f"{self.repo_api}/issues/{n}/comments",
            "statuses_url": f"{self.repo_api}/statuses/{pr['head_sha']}",
            "head": end(pr["head"], pr["head_sha"]), "base": end(pr["base"], self.branch(pr["base"]) or ""),
            "_links": {"self": {"href": api}}, "created_at": iso(pr["created"]), "updated_at": iso(time.time()),
            "closed_at": iso(pr["closed"]) if pr.get("closed") else None,
            "merged_at": iso(pr["closed"]) if pr.get("merge_sha") else None,
            "merge_commit_sha": pr.get("merge_sha"), "assignee": None, "assignees": [],
            "requested_reviewers": list(pr["requested_reviewers"]), "requested_teams": list(pr["requested_teams"]),
            "draft": pr["draft"], "merged": bool(pr.get("merge_sha")), "mergeable": True,
            "mergeable_state": "clean", "merged_by": None, "comments": 0, "review_comments": 0, "commits": 1,
            "additions": 1, "deletions": 0, "changed_files": 1, "author_association": "COLLABORATOR",
            "auto_merge": None, "maintainer_can_modify": False, "milestone": None,
        }

    def label(self, name: str) -> dict[str, Any]:
        return {"id": abs(hash(name)) % 10**6, "node_id": f"L_{name}", "url": f"{self.repo_api}/labels/{name}",
                "name": name, "color": "ededed", "default": False, "description": None}

    def issue_json(self, pr: dict[str, Any]) -> dict[str, Any]:
        n = pr["number"]
        api = f"{self.repo_api}/issues/{n}"
        return {"url": api, "id": 7000 + n, "node_id": f"I_{n}", "number": n, "title": pr["title"],
                "body": pr["body"], "body_html": None, "body_text": None, "state": "open" if pr["state"] == "open"
                else "closed", "locked": False, "user": self.user("infrarsi-bot"),
                "labels": [self.label(x) for x in pr["labels"]], "labels_url": api + "/labels{/name}",
                "comments_url": api + "/comments", "events_url": api + "/events", "html_url":
                f"{self.url}/{self.owner}/{self.name}/pull/{n}", "assignee": None, "assignees": [],
                "milestone": None, "comments": 0, "closed_at": None, "closed_by": None,
                "created_at": iso(pr["created"]), "updated_at": iso(time.time()), "repository_url": self.repo_api,
                "pull_request": {"url": f"{self.repo_api}/pulls/{n}"}, "author_association": "COLLABORATOR"}

    def comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        return {"id": c["id"], "node_id": f"IC_{c['id']}", "url": f"{self.repo_api}/issues/comments/{c['id']}",
                "html_url": f"{self.url}/{self.owner}/{self.name}/pull/{c['issue']}#issuecomment-{c['id']}",
                "issue_url": f"{self.repo_api}/issues/{c['issue']}", "body": c["body"], "body_html": None,
                "body_text": None, "user": self.user("infrarsi-bot"), "created_at": iso(c["created"]),
                "updated_at": iso(time.time()), "author_association": "COLLABORATOR"}

    def run_json(self, run: _Run) -> dict[str, Any]:
        api = f"{self.repo_api}/actions/runs/{run.id}"
        updated = (run.started + run.plan.duration_s) if run.status == "completed" and run.started else time.time()
        title = f"infrarsi trial {run.inputs.get('dispatch_id')}"  # the template's run-name
        return {"id": run.id, "name": "infrarsi-trial", "display_title": title,
                "node_id": f"WFR_{run.id}", "head_branch": run.ref, "head_sha": self.branch(run.ref),
                "path": f".github/workflows/{run.workflow}", "run_number": run.id, "run_attempt": 1,
                "event": "workflow_dispatch", "status": run.status, "conclusion": run.conclusion,
                "workflow_id": 55, "url": api, "html_url": f"{self.url}/{self.owner}/{self.name}/actions/runs/{run.id}",
                "artifacts_url": api + "/artifacts", "logs_url": api + "/logs", "jobs_url": api + "/jobs",
                "cancel_url": api + "/cancel", "created_at": iso(run.created),
                "run_started_at": iso(run.started) if run.started else iso(run.created), "updated_at": iso(updated)}

    # -- request handling ------------------------------------------------------------------------------
    def handle_api(self, method: str, path: str, query: dict[str, list[str]], body: Any) \
            -> tuple[int, dict[str, str], Any]:
        with self.lock:
            for inj in self.injected:
                if inj.times > 0 and inj.method == method and re.fullmatch(inj.pattern, path):
                    inj.times -= 1
                    return inj.status, inj.headers, inj.body
            for verb, pattern, fn in _ROUTES:
                m = re.fullmatch(pattern.format(repo=f"/repos/{self.owner}/{self.name}"), path)
                if m and verb == method:
                    return fn(self, m, query, body)
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}

    # routes: each returns (status, headers, json body)
    def _get_repo(self, m: re.Match[str], q: Any, b: Any) -> Any:
        return 200, {}, self.repository()

    def _list_pulls(self, m: re.Match[str], q: dict[str, list[str]], b: Any) -> Any:
        state = q.get("state", ["open"])[0]
        head = q.get("head", [None])[0]
        out = []
        for pr in sorted(self.state.pulls.values(), key=lambda p: -p["number"]):
            if state != "all" and (pr["state"] == "open") != (state == "open"):
                continue
            if head and head != f"{self.owner}:{pr['head']}":
                continue
            out.append(self.pull_json(pr))
        return 200, {}, out

    def _create_pull(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        missing = [k for k in ("title", "head", "base") if not b.get(k)]
        if missing:
            return 422, {}, {"message": "Validation Failed", "errors": [{"field": f, "code": "missing_field"}
                                                                       for f in missing]}
        head = b["head"].split(":", 1)[-1]
        if self.branch(head) is None:
            return 422, {}, {"message": "Validation Failed",
                             "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}]}
        if any(p["head"] == head and p["state"] == "open" for p in self.state.pulls.values()):
            return 422, {}, {"message": "Validation Failed", "errors": [
                {"resource": "PullRequest", "code": "custom", "message": f"A pull request already exists for "
                                                                          f"{self.owner}:{head}."}]}
        n = max(self.state.pulls, default=0) + 1
        self.state.pulls[n] = {"number": n, "head": head, "base": b["base"], "title": b["title"],
                               "body": b.get("body") or "", "state": "open", "draft": bool(b.get("draft")),
                               "labels": [], "requested_reviewers": [], "requested_teams": [],
                               "head_sha": self.branch(head), "created": time.time()}
        return 201, {}, self.pull_json(self.state.pulls[n])

    def _pr(self, m: re.Match[str]) -> dict[str, Any] | None:
        return self.state.pulls.get(int(m["n"]))

    def _get_pull(self, m: re.Match[str], q: Any, b: Any) -> Any:
        pr = self._pr(m)
        return (200, {}, self.pull_json(pr)) if pr else (404, {}, {"message": "Not Found"})

    def _update_pull(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        pr = self._pr(m)
        if pr is None:
            return 404, {}, {"message": "Not Found"}
        if b.get("state") == "open" and pr.get("merge_sha"):
            return 422, {}, {"message": "Validation Failed", "errors": [{"message": "merged"}]}
        if b.get("state") == "open" and pr["state"] == "closed" and self.branch(pr["head"]) != pr["head_sha"]:
            return 422, {}, {"message": "Validation Failed", "errors": [{
                "resource": "PullRequest", "code": "custom", "field": "state",
                "message": f"state cannot be changed. The {pr['head']} branch was force-pushed or recreated."}]}
        for key in ("title", "body", "base"):
            if key in b and b[key] is not None:
                pr[key] = b[key]
        if b.get("state") in ("open", "closed"):
            if b["state"] == "closed" and pr["state"] == "open":
                pr["head_sha"] = self.branch(pr["head"]) or pr["head_sha"]
            pr["state"] = b["state"]
            pr["closed"] = time.time() if b["state"] == "closed" else None
        return 200, {}, self.pull_json(pr)

    def _get_issue(self, m: re.Match[str], q: Any, b: Any) -> Any:
        pr = self._pr(m)
        return (200, {}, self.issue_json(pr)) if pr else (404, {}, {"message": "Not Found"})

    def _add_labels(self, m: re.Match[str], q: Any, b: Any) -> Any:
        pr = self._pr(m)
        assert pr is not None
        names = b["labels"] if isinstance(b, dict) else b
        pr["labels"] += [x for x in names if x not in pr["labels"]]
        return 200, {}, [self.label(x) for x in pr["labels"]]

    def _set_labels(self, m: re.Match[str], q: Any, b: Any) -> Any:
        pr = self._pr(m)
        assert pr is not None
        pr["labels"] = list(dict.fromkeys(b["labels"] if isinstance(b, dict) else b))
        return 200, {}, [self.label(x) for x in pr["labels"]]

    def _list_comments(self, m: re.Match[str], q: Any, b: Any) -> Any:
        n = int(m["n"])
        return 200, {}, [self.comment_json(c) for c in sorted(self.state.comments.values(), key=lambda c: c["id"])
                         if c["issue"] == n]

    def _create_comment(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        cid = self._id()
        self.state.comments[cid] = {"id": cid, "issue": int(m["n"]), "body": b["body"], "created": time.time()}
        return 201, {}, self.comment_json(self.state.comments[cid])

    def _edit_comment(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        c = self.state.comments.get(int(m["id"]))
        if c is None:
            return 404, {}, {"message": "Not Found"}
        c["body"] = b["body"]
        return 200, {}, self.comment_json(c)

    def _request_reviewers(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        pr = self._pr(m)
        assert pr is not None
        for login in b.get("reviewers") or []:
            if login not in self.collaborators:
                return 422, {}, {"message": "Reviews may only be requested from collaborators."}
            if all(u["login"] != login for u in pr["requested_reviewers"]):
                pr["requested_reviewers"].append(self.user(login))
        for slug in b.get("team_reviewers") or []:
            if all(t["slug"] != slug for t in pr["requested_teams"]):
                pr["requested_teams"].append(self.team(slug))
        return 201, {}, self.pull_json(pr)

    def _list_reviews(self, m: re.Match[str], q: Any, b: Any) -> Any:
        return 200, {}, [{k: v for k, v in r.items() if not k.startswith("_")}
                         for r in self.state.reviews.get(int(m["n"]), [])]

    def _merge(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        pr = self._pr(m)
        assert pr is not None
        if self.before_merge is not None:
            self.before_merge()
        if pr["state"] != "open":
            return 405, {}, {"message": "Pull Request is not mergeable"}
        git = pygit2.Repository(str(self.bare))
        head = self.branch(pr["head"])
        assert head is not None
        method = b.get("merge_method") or "merge"
        if method not in self.merge_methods:
            what = {"merge": "Merge commits", "squash": "Squash merges", "rebase": "Rebase merges"}[method]
            return 405, {}, {"message": f"{what} are not allowed on this repository."}
        if pr["draft"]:
            return 405, {}, {"message": "Pull Request is still a draft"}
        rules = self._effective(pr["base"])
        if rules["queue"]:
            return 405, {}, {"message": "Changes must be made through the merge queue"}
        if method == "merge" and rules["linear"]:
            return 405, {}, {"message": "Repository rule violations found\n\nThis branch must not contain merge "
                                        "commits."}
        if len(self._approving(pr["number"])) < rules["approvals"]:
            return 405, {}, {"message": f"At least {rules['approvals']} approving reviews are required by reviewers "
                                        "with write access."}
        for context in rules["checks"]:
            if self._check_state(head, context) != "success":
                return 405, {}, {"message": f"Required status check \"{context}\" is expected."}
        if b.get("sha") and b["sha"] != head:
            return 409, {}, {"message": "Head branch was modified. Review and try the merge again."}
        base_ref = git.references[f"refs/heads/{pr['base']}"]
        index = git.merge_commits(base_ref.target, pygit2.Oid(hex=head))
        if index.conflicts is not None:
            return 405, {}, {"message": "Pull Request is not mergeable"}
        tree = index.write_tree(git)
        message = (b.get("commit_title") or f"Merge pull request #{pr['number']}") + \
            ("\n\n" + b["commit_message"] if b.get("commit_message") else "")
        parents = [base_ref.target, pygit2.Oid(hex=head)] if method == "merge" else [base_ref.target]
        author = MERGER if method == "merge" else git.get(head).author  # squash/rebase keep the author
        sha = git.create_commit(None, author, MERGER, message, tree, parents)
        base_ref.set_target(sha)
        pr.update(state="closed", closed=time.time(), merge_sha=str(sha))
        return 200, {}, {"sha": str(sha), "merged": True, "message": "Pull Request successfully merged"}

    def _create_status(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        sid = self._id()
        status = {"id": sid, "node_id": f"SC_{sid}", "url": f"{self.repo_api}/statuses/{m['sha']}",
                  "state": b["state"], "description": b.get("description"), "target_url": b.get("target_url"),
                  "context": b.get("context", "default"), "created_at": iso(time.time()),
                  "updated_at": iso(time.time()), "creator": self.user("infrarsi-bot"), "avatar_url": None}
        self.state.statuses.setdefault(m["sha"], []).append(status)
        return 201, {}, status

    def _dispatch(self, m: re.Match[str], q: Any, b: dict[str, Any]) -> Any:
        ref = b.get("ref", "")
        if self.branch(ref) is None:
            return 422, {}, {"message": f"No ref found for: {ref}"}
        inputs = b.get("inputs") or {}
        rid = self._id()
        self.state.runs[rid] = _Run(id=rid, workflow=m["wf"], ref=ref, inputs=inputs, plan=self.plan_for(inputs),
                                    created=time.time())
        self.state.running_now += 1
        self.state.max_running = max(self.state.max_running, self.state.running_now)
        if self.state.runs[rid].plan.job is not None:
            threading.Thread(target=self._work, args=(self.state.runs[rid],), daemon=True).start()
        if b.get("return_run_details") and self.run_details:
            run_api = f"{self.repo_api}/actions/runs/{rid}"
            return 200, {}, {"workflow_run_id": rid, "run_url": run_api,
                             "html_url": f"{self.url}/{self.owner}/{self.name}/actions/runs/{rid}"}
        return 204, {}, None

    def _work(self, run: _Run) -> None:
        """A runner picks the run up at once and does its job; a cancelled run's late result is dropped."""
        assert run.plan.job is not None
        with self.lock:
            run.status, run.started = "in_progress", time.time()
        try:
            conclusion, files = run.plan.job()
        except Exception:  # noqa: BLE001  (a runner that breaks fails its run, as on GitHub)
            conclusion, files = "failure", {}
        with self.lock:
            if run.status == "completed":
                return
            run.plan.duration_s = time.time() - (run.started or time.time())
            run.status, run.conclusion = "completed", conclusion
            self.state.running_now -= 1
            if files:
                self._store_artifact(run, files)

    def _store_artifact(self, run: _Run, files: dict[str, bytes]) -> None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, content in files.items():
                z.writestr(name, content)
        run.artifact_id = self._id()
        self.state.artifacts[run.artifact_id] = buf.getvalue()

    def _get_run(self, m: re.Match[str], q: Any, b: Any) -> Any:
        run = self.state.runs.get(int(m["id"]))
        if run is None:
            return 404, {}, {"message": "Not Found"}
        run.polls += 1
        if run.plan.job is not None:
            return 200, {}, self.run_json(run)
        if run.status == "queued" and run.polls > run.plan.queued_polls:
            run.status, run.started = "in_progress", time.time()
        elif run.status == "in_progress" and run.polls > run.plan.queued_polls + run.plan.running_polls:
            run.status, run.conclusion = "completed", run.plan.conclusion
            self.state.running_now -= 1
            if run.plan.artifact is not None:
                self._store_artifact(run, run.plan.artifact)
        return 200, {}, self.run_json(run)

    def _cancel_run(self, m: re.Match[str], q: Any, b: Any) -> Any:
        run = self.state.runs.get(int(m["id"]))
        if run is None:
            return 404, {}, {"message": "Not Found"}
        if run.status == "completed":
            return 409, {}, {"message": "Cannot cancel a workflow run that is completed."}
        run.status, run.conclusion = "completed", "cancelled"
        run.started = run.started or time.time()
        run.plan.duration_s = time.time() - run.started
        self.state.running_now -= 1
        return 202, {}, {}

    def _list_runs(self, m: re.Match[str], q: dict[str, list[str]], b: Any) -> Any:
        runs = [self.run_json(r) for r in sorted(self.state.runs.values(), key=lambda r: -r.id)
                if r.workflow == m["wf"] and ("branch" not in q or r.ref == q["branch"][0])]
        return 200, {}, {"total_count": len(runs), "workflow_runs": runs}

    def _run_artifacts(self, m: re.Match[str], q: Any, b: Any) -> Any:
        run = self.state.runs.get(int(m["id"]))
        arts = []
        if run is not None and run.artifact_id is not None:
            name = run.plan.artifact_name or f"infrarsi-trial-{run.inputs.get('dispatch_id')}"
            aid = run.artifact_id
            arts.append({"id": aid, "node_id": f"MDg_{aid}", "name": name,
                         "size_in_bytes": len(self.state.artifacts[aid]), "expired": False,
                         "url": f"{self.repo_api}/actions/artifacts/{aid}",
                         "archive_download_url": f"{self.repo_api}/actions/artifacts/{aid}/zip",
                         "created_at": iso(time.time()), "expires_at": iso(time.time() + 86400),
                         "workflow_run": {"id": run.id, "head_branch": run.ref}})
        return 200, {}, {"total_count": len(arts), "artifacts": arts}

    def _artifact_zip(self, m: re.Match[str], q: Any, b: Any) -> Any:
        aid = int(m["id"])
        if aid not in self.state.artifacts:
            return 404, {}, {"message": "Not Found"}
        return 302, {"Location": f"{self.url}/blob-storage/{aid}?sig=signed"}, None

    def _get_ref(self, m: re.Match[str], q: Any, b: Any) -> Any:
        sha = self.branch(m["ref"])
        if sha is None:
            return 404, {}, {"message": "Not Found"}
        return 200, {}, {"ref": f"refs/heads/{m['ref']}", "node_id": "REF_1", "url": f"{self.repo_api}/git/refs/"
                         f"heads/{m['ref']}", "object": {"sha": sha, "type": "commit",
                                                         "url": f"{self.repo_api}/git/commits/{sha}"}}

    def _check_state(self, sha: str, context: str) -> str:
        for s in reversed(self.state.statuses.get(sha, [])):
            if s["context"] == context:
                return s["state"]
        for run in self.state.check_runs.get(sha, []):
            if run["name"] == context:
                return run["conclusion"] if run["status"] == "completed" else "pending"
        return "missing"

    def _get_branch(self, m: re.Match[str], q: Any, b: Any) -> Any:
        sha = self.branch(m["branch"])
        if sha is None:
            return 404, {}, {"message": "Branch not found"}
        api = f"{self.repo_api}/branches/{m['branch']}"
        required = self._classic_checks(m["branch"])
        protection = {"enabled": self._protected(m["branch"]), "required_status_checks": {
            "enforcement_level": "non_admins" if required else "off", "contexts": required,
            "checks": [{"context": c, "app_id": None} for c in required]}}
        return 200, {}, {"name": m["branch"], "commit": {"sha": sha, "url": f"{self.repo_api}/commits/{sha}"},
                         "_links": {"self": api, "html": f"{self.url}/{self.owner}/{self.name}/tree/{m['branch']}"},
                         "protected": self._protected(m["branch"]), "protection": protection,
                         "protection_url": api + "/protection"}

    def _combined_status(self, m: re.Match[str], q: Any, b: Any) -> Any:
        latest: dict[str, dict[str, Any]] = {}
        for s in self.state.statuses.get(m["sha"], []):
            latest[s["context"]] = s
        statuses = sorted(latest.values(), key=lambda s: -s["id"])
        states = {s["state"] for s in statuses}
        state = "failure" if states & {"failure", "error"} else "pending" if "pending" in states or not states \
            else "success"
        return 200, {}, {"state": state, "statuses": statuses, "sha": m["sha"], "total_count": len(statuses),
                         "repository": self.repository(), "commit_url": f"{self.repo_api}/commits/{m['sha']}",
                         "url": f"{self.repo_api}/commits/{m['sha']}/status"}

    def _check_runs(self, m: re.Match[str], q: Any, b: Any) -> Any:
        runs = self.state.check_runs.get(m["sha"], [])
        return 200, {}, {"total_count": len(runs), "check_runs": runs}

    def add_check_run(self, sha: str, name: str, *, status: str = "completed", conclusion: str | None = "success") \
            -> None:
        rid = self._id()
        self.state.check_runs.setdefault(sha, []).insert(0, {
            "id": rid, "head_sha": sha, "node_id": f"CR_{rid}", "external_id": "", "name": name, "status": status,
            "conclusion": conclusion if status == "completed" else None, "started_at": iso(time.time()),
            "completed_at": iso(time.time()) if status == "completed" else None,
            "url": f"{self.repo_api}/check-runs/{rid}", "html_url": None, "details_url": None,
            "output": {"title": None, "summary": None, "text": None, "annotations_count": 0, "annotations_url": ""},
            "check_suite": None, "app": None, "pull_requests": []})

    def _collaborator_permission(self, m: re.Match[str], q: Any, b: Any) -> Any:
        """``GET /repos/{o}/{r}/collaborators/{user}/permission``: the owner is admin, a collaborator may write,
        anyone else reads (``permission`` is the legacy field: maintain reads as write, triage as read)."""
        login = m["user"]
        permission = "admin" if login == self.owner else "write" if login in self.collaborators else "read"
        return 200, {}, {"permission": permission, "role_name": permission, "user": self.user(login)}

    def _team_membership(self, m: re.Match[str], q: Any, b: Any) -> Any:
        if m["org"] != self.owner or m["login"] not in self.teams.get(m["slug"], set()):
            return 404, {}, {"message": "Not Found"}
        return 200, {}, {"url": f"{self.api}/orgs/{self.owner}/teams/{m['slug']}/memberships/{m['login']}",
                         "role": "member", "state": "active"}

    def _collaborator(self, m: re.Match[str], q: Any, b: Any) -> Any:
        return (204, {}, None) if m["login"] in self.collaborators else (404, {}, {"message": "Not Found"})


_N = r"(?P<n>\d+)"
_ROUTES: list[tuple[str, str, Callable[..., Any]]] = [
    ("GET", r"{repo}", FakeGitHub._get_repo),
    ("GET", r"{repo}/pulls", FakeGitHub._list_pulls),
    ("POST", r"{repo}/pulls", FakeGitHub._create_pull),
    ("GET", r"{repo}/pulls/" + _N, FakeGitHub._get_pull),
    ("PATCH", r"{repo}/pulls/" + _N, FakeGitHub._update_pull),
    ("PUT", r"{repo}/pulls/" + _N + "/merge", FakeGitHub._merge),
    ("POST", r"{repo}/pulls/" + _N + "/requested_reviewers", FakeGitHub._request_reviewers),
    ("GET", r"{repo}/pulls/" + _N + "/reviews", FakeGitHub._list_reviews),
    ("GET", r"{repo}/issues/" + _N, FakeGitHub._get_issue),
    ("POST", r"{repo}/issues/" + _N + "/labels", FakeGitHub._add_labels),
    ("PUT", r"{repo}/issues/" + _N + "/labels", FakeGitHub._set_labels),
    ("GET", r"{repo}/issues/" + _N + "/comments", FakeGitHub._list_comments),
    ("POST", r"{repo}/issues/" + _N + "/comments", FakeGitHub._create_comment),
    ("PATCH", r"{repo}/issues/comments/(?P<id>\d+)", FakeGitHub._edit_comment),
    ("POST", r"{repo}/statuses/(?P<sha>[0-9a-f]{{40}})", FakeGitHub._create_status),
    ("POST", r"{repo}/actions/workflows/(?P<wf>[^/]+)/dispatches", FakeGitHub._dispatch),
    ("GET", r"{repo}/actions/workflows/(?P<wf>[^/]+)/runs", FakeGitHub._list_runs),
    ("GET", r"{repo}/actions/runs/(?P<id>\d+)", FakeGitHub._get_run),
    ("POST", r"{repo}/actions/runs/(?P<id>\d+)/cancel", FakeGitHub._cancel_run),
    ("GET", r"{repo}/actions/runs/(?P<id>\d+)/artifacts", FakeGitHub._run_artifacts),
    ("GET", r"{repo}/actions/artifacts/(?P<id>\d+)/zip", FakeGitHub._artifact_zip),
    ("GET", r"{repo}/git/ref/heads/(?P<ref>.+)", FakeGitHub._get_ref),
    ("GET", r"{repo}/collaborators/(?P<login>[^/]+)", FakeGitHub._collaborator),
    ("GET", r"{repo}/collaborators/(?P<user>[^/]+)/permission", FakeGitHub._collaborator_permission),
    ("GET", r"{repo}/branches/(?P<branch>.+)/protection", FakeGitHub._get_protection),
    ("GET", r"{repo}/branches/(?P<branch>.+)", FakeGitHub._get_branch),
    ("GET", r"{repo}/rules/branches/(?P<branch>.+)", FakeGitHub._branch_rules),
    ("POST", r"/api/graphql", FakeGitHub._graphql),
    ("GET", r"{repo}/commits/(?P<sha>[0-9a-f]{{40}})/status", FakeGitHub._combined_status),
    ("GET", r"{repo}/commits/(?P<sha>[0-9a-f]{{40}})/check-runs", FakeGitHub._check_runs),
    ("GET", r"/orgs/(?P<org>[^/]+)/teams/(?P<slug>[^/]+)/memberships/(?P<login>[^/]+)", FakeGitHub._team_membership),
]


#: Object answers whose list GitHub pages (``total_count`` stays the whole count).
PAGED_KEYS = ("artifacts", "workflow_runs", "check_runs", "statuses")


def paginate(url: str, query: dict[str, list[str]], payload: Any) -> tuple[Any, dict[str, str]]:
    """One page of a list answer as GitHub serves it: ``per_page`` (default 30, at most 100) and ``page``,
    and a ``Link`` header naming the next and last pages."""
    key = next((k for k in PAGED_KEYS if isinstance(payload, dict) and isinstance(payload.get(k), list)), None)
    items = payload if isinstance(payload, list) else payload[key] if key else None
    if items is None:
        return payload, {}
    per_page = min(100, int((query.get("per_page") or ["30"])[0]))
    page = max(1, int((query.get("page") or ["1"])[0]))
    last = max(1, -(-len(items) // per_page))
    chunk = items[(page - 1) * per_page:page * per_page]
    links = []
    for rel, n in (("next", page + 1), ("last", last)):
        if page < last:
            q = {**{k: v[0] for k, v in query.items()}, "per_page": str(per_page), "page": str(n)}
            links.append(f'<{url}?{"&".join(f"{k}={v}" for k, v in q.items())}>; rel="{rel}"')
    return (chunk if key is None else {**payload, key: chunk}), ({"Link": ", ".join(links)} if links else {})


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeGitHub
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet)
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _dispatch(self) -> None:
        fake = self.server_fake
        parsed = urlparse(self.path)
        raw = self._read_body()
        if parsed.path.startswith("/git/"):
            return self._git(parsed.path, parsed.query, raw)
        if parsed.path.startswith("/blob-storage/"):
            if "Authorization" in self.headers:  # storage must never see the token
                return self._send(400, {}, b"token leaked to storage")
            data = fake.state.artifacts[int(parsed.path.rsplit("/", 1)[1])]
            return self._send(200, {"Content-Type": "application/zip"}, data)
        path = parsed.path.removeprefix("/api/v3").rstrip("/")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        fake.requests.append(Recorded(self.command, path, parse_qs(parsed.query), dict(self.headers), body))
        if self.headers.get("Authorization") not in (f"token {fake.token}", f"Bearer {fake.token}"):
            return self._send(401, {"Content-Type": "application/json"},
                              b'{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}')
        status, headers, payload = fake.handle_api(self.command, path, parse_qs(parsed.query), body)
        if status == 0:  # a dropped connection: no status line, nothing
            self.close_connection = True
            return None
        if self.command == "GET" and status == 200:
            payload, links = paginate(f"{fake.api}{path}", parse_qs(parsed.query), payload)
            headers = {**headers, **links}
        data = b"" if payload is None else json.dumps(payload).encode()
        self._send(status, {"Content-Type": "application/json; charset=utf-8", **headers}, data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _dispatch

    def _git(self, path: str, query: str, body: bytes) -> None:
        """git smart HTTP through ``git http-backend`` (CGI), behind basic auth with the token as password."""
        fake = self.server_fake
        auth = self.headers.get("Authorization", "")
        user = None
        if auth.startswith("Basic "):
            name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            if password == (fake.git_token or fake.token):
                user = name
        fetching = "git-upload-pack" in path or "service=git-upload-pack" in query
        if user is None and fetching and not fake.private:
            user = "anonymous"  # a public repository: anyone may clone
        if user is None:
            if auth:
                fake.git_auth_failures += 1
            return self._send(401, {"WWW-Authenticate": 'Basic realm="GitHub"'}, b"")
        env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME")},
               "GIT_PROJECT_ROOT": str(fake.root / "git"), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path.removeprefix("/git"), "REQUEST_METHOD": self.command, "QUERY_STRING": query,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "REMOTE_USER": user, "REMOTE_ADDR": "127.0.0.1", "GIT_CONFIG_NOSYSTEM": "1"}
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status, headers = 200, {}
        for line in head.decode().splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers[key.strip()] = value.strip()
        self._send(status, headers, payload)


# The run step of workflows/infrarsi-trial.yml, as the simulated runner executes it (test_workflows pins it).
TRIAL_STEP = ('"$RUNNER_TEMP/infrarsi/bin/python" -m bot.executors.actions --candidate "$CANDIDATE" --checkout . '
              '--out "$RUNNER_TEMP/infrarsi-trial"')
#: The interpreter of the trial's own environment, which the workflow's install step creates (here: this one).
TRIAL_PYTHON = '"$RUNNER_TEMP/infrarsi/bin/python"'


class TrialWorkflowRunner:
    """A self-hosted runner doing what ``workflows/infrarsi-trial.yml`` does, for real, on this machine.

    Per dispatch: a fresh clone of ``trial_branch`` as the server holds it (what the bot pushed, not the
    bot's worktree), then the workflow's run step (``python -m bot.executors.actions``, the real runner
    side) in that checkout with the runner's own environment, then the upload of whatever it wrote, even
    when the step failed. Use as ``fake.plan_for = TrialWorkflowRunner(fake)``.
    """

    def __init__(self, fake: FakeGitHub, *, environ: dict[str, str] | None = None) -> None:
        self.fake = fake
        self.environ = environ
        self.checkouts: list[tuple[str, str]] = []  # (branch, commit) of every checkout, in dispatch order

    def __call__(self, inputs: dict[str, Any]) -> RunPlan:
        return RunPlan(job=lambda: self.run(inputs))

    def run(self, inputs: dict[str, Any]) -> tuple[str, dict[str, bytes]]:
        import shutil
        import sys
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="runner-", dir=self.fake.root))
        checkout, temp = work / "checkout", work / "temp"
        try:
            cloned = subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", inputs["trial_branch"],
                                     self.fake.bare.as_uri(), str(checkout)], capture_output=True, text=True,
                                    timeout=120)
            if cloned.returncode != 0:
                return "failure", {}
            head = pygit2.Repository(str(checkout)).head.target
            with self.fake.lock:
                self.checkouts.append((inputs["trial_branch"], str(head)))
            env = {**(os.environ if self.environ is None else self.environ), "CANDIDATE": inputs["candidate"],
                   "RUNNER_TEMP": str(temp)}
            timeout = float(json.loads(inputs["candidate"])["spec"]["timeout_s"]) + 120
            step = subprocess.run(["bash", "-e", "-c", TRIAL_STEP.replace(TRIAL_PYTHON, sys.executable, 1)],
                                  cwd=checkout, env=env, capture_output=True, timeout=timeout)
            out = temp / "infrarsi-trial"
            files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} if out.is_dir() else {}
            return ("success" if step.returncode == 0 else "failure"), files
        finally:
            shutil.rmtree(work, ignore_errors=True)
