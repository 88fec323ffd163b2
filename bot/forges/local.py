"""The local forge: a bare git remote plus pull-request records on disk (the offline default).

The remote is any bare repository reachable as a path. Pull requests live
beside its refs in ``<remote>/infrarsi-forge/``: ``pulls/<n>.json`` (the record:
head, base, title, body, labels, reviewers, reviews, comments) and
``pulls/<n>.md`` (its body rendered, for a human to read), and
``statuses.json``. Every clone of the remote therefore sees the same pull
requests, as it would on a hosted forge. Record updates take an exclusive
``flock`` so two bots on one machine cannot interleave them.

The rules a hosted forge enforces that mean something here live in
``settings.json`` beside them (:meth:`LocalForge.configure`, :meth:`LocalForge.protect`):
the merge methods the repository allows, and per base branch the approving
reviews it requires and whether its history must stay linear. The merge
enforces them as GitHub does, so the offline demo and the tests run promote's
path through them.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from bot.workspace.commits import BotIdentity
from bot.workspace.errors import GitLayerError, MergeConflictError, RemoteError, RevisionNotFoundError
from bot.workspace.refs import branch_tip, is_bare, is_descendant, remote_url, repository_dir
from bot.workspace.remotes import fetch, push
from bot.workspace.trees import merge_into_branch
from infrarsi.seams.forge import (
    MERGE_METHODS,
    EnsureAction,
    ForgeError,
    MergeMethod,
    MergeMethodRefused,
    MergeRules,
    PullRequest,
    PullRequestDraft,
    QueueEntry,
    Review,
    ReviewState,
    StatusState,
    standing_reviews,
)

__all__ = ["LocalForge", "local_remote_path"]

RECORDS_DIR = "infrarsi-forge"
SETTINGS_FILE = "settings.json"  # {"merge_methods": [...], "branches": {"main": {"required_approvals": 1, ...}}}
MERGER = BotIdentity(name="infrarsi-local-forge", email="forge@infrarsi.local")


def local_remote_path(repo: Path, remote: str = "origin") -> Path:
    """The bare repository a local ``remote`` of ``repo`` points to; ForgeError if it is not a local path."""
    url = remote_url(repo, remote)
    if url is None:
        raise ForgeError(f"{repo}: no git remote {remote!r}; the local forge needs one that is a bare repository "
                         f"on disk (git remote add {remote} /path/to/remote.git)") from None
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else url)
        path = path if path.is_absolute() else (repository_dir(repo) / path)
        if path.is_dir():
            return path.resolve()
    raise ForgeError(f"{repo}: remote {remote!r} is {url!r}, not a repository on disk; use --forge github "
                     "for a hosted remote")


class LocalForge:
    """A :class:`infrarsi.seams.forge.Forge` over a bare repository at ``remote``."""

    name = "local"

    def __init__(self, remote: Path) -> None:
        self.remote = Path(remote).resolve()
        try:
            bare = is_bare(self.remote)
        except GitLayerError as exc:
            raise ForgeError(f"{self.remote}: not a git repository ({exc})") from exc
        if not bare:
            raise ForgeError(f"{self.remote}: the local forge's remote must be a bare repository")
        self.records = self.remote / RECORDS_DIR
        (self.records / "pulls").mkdir(parents=True, exist_ok=True)

    # -- records -----------------------------------------------------------------------------------

    def record_path(self, number: int) -> Path:
        """The JSON record of pull request ``number`` (the rendered body is beside it, ``.md``)."""
        return self.records / "pulls" / f"{number}.json"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.records / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _load(self, number: int) -> dict[str, Any]:
        path = self.record_path(number)
        if not path.is_file():
            raise ForgeError(f"pull request #{number} does not exist on the local forge {self.remote}")
        return json.loads(path.read_text(encoding="utf-8"))

    def _save(self, record: dict[str, Any]) -> None:
        path = self.record_path(record["number"])
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        head = f"# #{record['number']} {record['title']}\n\n" \
               f"`{record['head']}` → `{record['base']}` · {record['state']}" \
               + (" · draft" if record.get("draft") else "") \
               + (f" · labels: {', '.join(record['labels'])}" if record["labels"] else "") + "\n\n"
        path.with_suffix(".md").write_text(head + record["body"], encoding="utf-8")

    def _all(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text(encoding="utf-8")) for p in (self.records / "pulls").glob("*.json")]

    def _branch_sha(self, branch: str) -> str | None:
        return branch_tip(self.remote, branch)

    def _pr(self, record: dict[str, Any]) -> PullRequest:
        head_sha = record["head_sha"]
        if record["state"] == "open":
            head_sha = self._branch_sha(record["head"]) or head_sha
        return PullRequest(number=record["number"], head=record["head"], base=record["base"], title=record["title"],
                           body=record["body"], state=record["state"], head_sha=head_sha,
                           url=self.record_path(record["number"]).with_suffix(".md").as_uri(),
                           draft=record.get("draft", False), labels=tuple(record["labels"]),
                           requested_reviewers=tuple(record["requested_reviewers"]))

    # -- the Forge verbs ---------------------------------------------------------------------------

    def push(self, repo: Path, branch: str, *, force: bool = False) -> str:
        sha = branch_tip(repo, branch)
        if sha is None:
            raise ForgeError(f"refs/heads/{branch}: no such branch in {repo}")
        current = self._branch_sha(branch)
        if current == sha:
            return sha
        if current is not None and not force:
            if not is_descendant(repo, sha, current):
                raise ForgeError(f"refs/heads/{branch}: rejected by {self.remote} (non-fast-forward: the remote "
                                 f"branch is at {current[:10]}, which {sha[:10]} does not contain)")
        spec = f"{'+' if force else ''}refs/heads/{branch}:refs/heads/{branch}"
        try:
            push(repo, str(self.remote), [spec])
        except RemoteError as exc:
            raise ForgeError(f"refs/heads/{branch}: push to {self.remote} failed: {exc}") from exc
        if self._branch_sha(branch) != sha:
            raise ForgeError(f"refs/heads/{branch}: {self.remote} did not take the push")
        return sha

    def find_pr(self, head: str) -> PullRequest | None:
        found = [r for r in self._all() if r["head"] == head]
        if not found:
            return None
        found.sort(key=lambda r: (r["state"] == "open", r["number"]), reverse=True)
        return self._pr(found[0])

    def get_pr(self, number: int) -> PullRequest:
        return self._pr(self._load(number))

    def ensure_pr(self, draft: PullRequestDraft, *, reopen: bool = False) -> tuple[PullRequest, EnsureAction]:
        with self._locked():
            existing = self.find_pr(draft.head)
            head_sha = self._branch_sha(draft.head)
            if existing is None:
                if head_sha is None:
                    raise ForgeError(f"cannot open a pull request for {draft.head!r}: the branch is not on "
                                     f"{self.remote}; push it first")
                if self._branch_sha(draft.base) is None:
                    raise ForgeError(f"cannot open a pull request into {draft.base!r}: no such branch on "
                                     f"{self.remote}")
                number = max((r["number"] for r in self._all()), default=0) + 1
                record = {"number": number, "head": draft.head, "base": draft.base, "title": draft.title,
                          "body": draft.body, "labels": sorted(set(draft.labels)), "draft": draft.draft,
                          "state": "open", "head_sha": head_sha, "requested_reviewers": [], "reviews": [],
                          "comments": [], "created_at": time.time(), "merge_commit": None}
                self._save(record)
                return self._pr(record), "created"
            record = self._load(existing.number)
            if record["state"] != "open" and not (reopen and record["state"] == "closed"):
                return self._pr(record), "closed"
            want = {"title": draft.title, "body": draft.body,
                    "labels": sorted(set(record["labels"]) | set(draft.labels)), "state": "open"}
            if all(record[k] == v for k, v in want.items()):
                return self._pr(record), "unchanged"
            record.update(want)
            record["head_sha"] = head_sha or record["head_sha"]
            self._save(record)
            return self._pr(record), "updated"

    def ensure_comment(self, number: int, marker: str, body: str) -> None:
        with self._locked():
            record = self._load(number)
            for comment in record["comments"]:
                if marker in comment["body"]:
                    if comment["body"] == body:
                        return
                    comment["body"] = body
                    break
            else:
                record["comments"].append({"id": len(record["comments"]) + 1, "body": body,
                                           "created_at": time.time()})
            self._save(record)

    def request_review(self, number: int, users: tuple[str, ...], teams: tuple[str, ...] = ()) -> None:
        with self._locked():
            record = self._load(number)
            wanted = sorted(set(record["requested_reviewers"]) | set(users) | set(teams))
            if wanted != record["requested_reviewers"]:
                record["requested_reviewers"] = wanted
                self._save(record)

    def reviews(self, number: int) -> tuple[Review, ...]:
        record = self._load(number)
        return tuple(Review(login=r["login"], state=r["state"], commit_sha=r["commit_sha"],
                            submitted_at=r["submitted_at"]) for r in record["reviews"])

    def merge(self, number: int, *, expected_head_sha: str, message: str, method: MergeMethod = "merge") -> str:
        with self._locked():
            record = self._load(number)
            pr = self._pr(record)
            if pr.state != "open":
                raise ForgeError(f"pull request #{number} is {pr.state}; only an open one can be merged")
            rules = self.merge_rules(pr)
            refused = dict(rules.refused_methods)
            if rules.linear_history:
                refused.setdefault("merge", f"{pr.base} requires a linear history")
            if method in refused:
                raise MergeMethodRefused(method, refused[method])
            if pr.head_sha != expected_head_sha:
                raise ForgeError(f"pull request #{number}: head is {pr.head_sha[:10]}, not the expected "
                                 f"{expected_head_sha[:10]}; someone pushed since it was checked")
            if self._branch_sha(pr.base) is None:
                raise ForgeError(f"pull request #{number}: base branch {pr.base!r} is gone from {self.remote}")
            approving, changes = standing_reviews(self.reviews(number))
            if rules.required_approvals and (len(approving) < rules.required_approvals or changes):
                raise ForgeError(f"pull request #{number}: {pr.base} requires {rules.required_approvals} approving "
                                 f"review(s) and no change requests; it has {len(approving)}"
                                 + (f", changes requested by {', '.join(changes)}" if changes else ""))
            try:
                sha = merge_into_branch(self.remote, pr.base, pr.head_sha, message=message, identity=MERGER,
                                        method=method)
            except MergeConflictError as exc:
                raise ForgeError(f"pull request #{number} conflicts with {pr.base} in {', '.join(exc.paths)}") from exc
            except RevisionNotFoundError as exc:
                raise ForgeError(f"pull request #{number}: {exc}") from exc
            record.update(state="merged", merge_commit=sha, head_sha=pr.head_sha, merged_at=time.time())
            self._save(record)
            return sha

    def set_status(self, sha: str, *, context: str, state: StatusState, description: str) -> None:
        with self._locked():
            path = self.records / "statuses.json"
            data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            data.setdefault(sha, {})[context] = {"state": state, "description": description,
                                                 "updated_at": time.time()}
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def fetch(self, repo: Path, branches: tuple[str, ...], *, remote: str = "origin") -> dict[str, str]:
        found = {b: sha for b in branches if (sha := self._branch_sha(b)) is not None}
        specs = [f"+refs/heads/{b}:refs/remotes/{remote}/{b}" for b in found]
        if specs:
            try:
                fetch(repo, str(self.remote), specs)
            except RemoteError as exc:
                raise ForgeError(f"fetch of {', '.join(found)} from {self.remote} failed: {exc}") from exc
        return found

    def blob_url(self, ref: str, path: str) -> str:
        """The bare repository's URI with ``#<ref>:<path>`` (what ``git show`` takes in the bare repository)."""
        return f"{self.remote.as_uri()}#{ref}:{path}"

    def team_member(self, team: str, login: str) -> bool:
        path = self.records / "teams.json"
        teams = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return login.lower() in {m.lower() for m in teams.get(team, ())}

    def enqueue(self, pr: PullRequest, *, expected_head_sha: str) -> QueueEntry:
        raise ForgeError(f"pull request #{pr.number}: the local forge has no merge queues; it merges directly")

    def merge_rules(self, pr: PullRequest) -> MergeRules:
        settings = self._settings()
        allowed = settings.get("merge_methods", list(MERGE_METHODS))
        where = self.records / SETTINGS_FILE
        refused = tuple((m, f"the local forge allows only {', '.join(allowed)} ({where})") for m in MERGE_METHODS
                        if m not in allowed)
        rule = settings.get("branches", {}).get(pr.base)
        return MergeRules(base=pr.base, protected=rule is not None, refused_methods=refused,
                          required_approvals=int((rule or {}).get("required_approvals", 0)),
                          linear_history=bool((rule or {}).get("linear_history", False)))

    def _settings(self) -> dict[str, Any]:
        path = self.records / SETTINGS_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except ValueError as exc:
            raise ForgeError(f"{path}: not valid JSON ({exc}); fix or delete it") from None

    # -- the human side (``infrarsi approve``, the demo, tests) ------------------------------------

    def configure(self, *, merge_methods: tuple[MergeMethod, ...]) -> None:
        """The merge methods this repository allows (GitHub's "Allow merge commits / squash / rebase")."""
        if not merge_methods or set(merge_methods) - set(MERGE_METHODS):
            raise ForgeError(f"merge methods must be a non-empty choice of {', '.join(MERGE_METHODS)}, got "
                             f"{merge_methods!r}")
        self._update_settings(lambda s: s.update(merge_methods=[m for m in MERGE_METHODS if m in merge_methods]))

    def protect(self, branch: str, *, required_approvals: int = 0, linear_history: bool = False) -> None:
        """Protect ``branch``: merging into it needs ``required_approvals`` approving reviews (and no change
        requests), and with ``linear_history`` a squash or a rebase instead of a merge commit."""
        rule = {"required_approvals": required_approvals, "linear_history": linear_history}
        self._update_settings(lambda s: s.setdefault("branches", {}).update({branch: rule}))

    def _update_settings(self, change: Callable[[dict[str, Any]], object]) -> None:
        with self._locked():
            settings = self._settings()
            change(settings)
            (self.records / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n",
                                                      encoding="utf-8")


    def add_team_member(self, team: str, login: str) -> None:
        """``login`` joins ``team`` (``org/team-slug``) on this forge: the offline stand-in for GitHub's teams."""
        with self._locked():
            path = self.records / "teams.json"
            teams = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            teams[team] = sorted(set(teams.get(team, [])) | {login})
            path.write_text(json.dumps(teams, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def submit_review(self, number: int, login: str, state: ReviewState, commit_sha: str | None = None) -> Review:
        """Record a review by ``login`` on ``commit_sha`` (default: the current head)."""
        with self._locked():
            record = self._load(number)
            pr = self._pr(record)
            review = Review(login=login, state=state, commit_sha=commit_sha or pr.head_sha,
                            submitted_at=max([time.time()] + [r["submitted_at"] + 1e-6 for r in record["reviews"]]))
            record["reviews"].append({"login": review.login, "state": review.state,
                                      "commit_sha": review.commit_sha, "submitted_at": review.submitted_at})
            self._save(record)
            return review

    def close(self, number: int) -> PullRequest:
        with self._locked():
            record = self._load(number)
            if record["state"] == "open":
                record["state"] = "closed"
                record["head_sha"] = self._pr(record).head_sha
                self._save(record)
            return self._pr(record)

    def comments(self, number: int) -> list[str]:
        return [c["body"] for c in self._load(number)["comments"]]

    def statuses(self, sha: str) -> dict[str, StatusState]:
        path = self.records / "statuses.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return {context: s["state"] for context, s in data.get(sha, {}).items()}
