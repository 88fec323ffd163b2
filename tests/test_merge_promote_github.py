"""Promotion on GitHub, scenario by scenario: the local GitHub-shaped server, real git pushes and fetches.

One finished run (the session's shared template: real trials, recorded verdict) is applied once per
module to ``tests/support/fake_github.py`` with the GitHub forge; each test starts a server on a copy of that
state, plays what people and GitHub do, and runs ``promote``. The re-verification is a recorder that notes the base it was asked to run on and passes
(the A/B itself is tested in ``test_verify*``; ``test_merge_promote.py`` runs a real one), so each scenario
costs seconds, not trials.

| scenario | merged | verified on | the pull request shows |
|---|---|---|---|
| base unchanged | the approved head (merge commit, same tree) | the base | merged, infrarsi/verify success |
| base moved before approval (apply rerun) | the re-applied head, once approved | the new base | merged |
| base moved after approval | nothing, until the re-created head is approved; then it | the new base (twice) | new head, review re-requested |
| base moved during re-verification | nothing | the old base | open, "moved during the re-verification" |
| private repository, token without contents | nothing, nothing verified | — | open; the fetch error names the remote |
| deleted reviewer (``user: null``) | nothing | — | open; one line, no traceback (CLI) |
| draft pull request | nothing, nothing verified | — | open, draft |
| squash-only repository (settings shown, or hidden: 405 then squash) | the approved tree, one parent | the base | merged by squash |
| rebase-only / merge-only repository | the approved tree, by rebase / by merge commit | the base | merged |
| a named method, a pending required check, 2 approvals with 1 given, code-owner review missing | nothing, nothing verified | — | open; one line naming each rule |
| linear history (protection, ruleset, or unreadable: 405) | the approved tree, squashed | the base | merged by squash |
| merge queue | nothing yet: queued by GraphQL enqueuePullRequest | the base | in the queue |
| base moves as the merge lands | a tree nobody approved: reported | the base | merged; promote exits 1 naming it |
| team approval | the approved head | the base | merged; a non-member's approval refused |
| human push to the promotion branch | nothing | — | open; "commits by someone else" |

Every merge is checked against the invariant: the base's new tree is the exact tree of a commit a
listed approver (or a member of a listed team) approved.
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
import pytest
import yaml

from bot.forges.github import GitHubForge, forge_for_repo
from bot.forges.github_api import GitHubTarget, RetryPolicy
from bot.stages.apply.merge import PromoteError, PromoteResult, promote
from bot.stages.apply.open_pr import apply_run
from bot.workspace import GitWorkspace
from bot.workspace.refs import set_branch
from infrarsi.trial_record import Candidate
from infrarsi.verdict import Verdict
from tests.support.tinygpt import infrarsi
from tests.support.fake_github import TOKEN, FakeGitHub, State
from tests.support.promotion import RUN_ID, clone_template, passing_verdict, promoted_template  # noqa: F401
from tests.support.repos import git

pytestmark = pytest.mark.slow  # the shared template runs real trials once per session; each scenario is seconds
BRANCH = f"infrarsi/promote/{RUN_ID}"
HUMAN = pygit2.Signature("Dana Human", "dana@example.com")


@dataclass
class Scene:
    repo: Path
    fake: FakeGitHub
    forge: GitHubForge
    verified: list[str] = field(default_factory=list)  # the base of every re-verification, in order
    during: list[dict[str, str]] = field(default_factory=list)  # server commits to make while verifying
    said: list[str] = field(default_factory=list)

    def reverify(self, repo: Path, run_id: str, candidate: Candidate, base: str) -> Verdict:
        self.verified.append(base)
        for files in self.during:
            self.server_commit("main", files)
        return passing_verdict(candidate)

    def promote(self) -> PromoteResult:
        return promote(self.repo, 1, workspace=GitWorkspace(self.repo), forge=self.forge, reverify=self.reverify,
                       say=self.said.append)

    def refused(self) -> str:
        with pytest.raises(PromoteError) as caught:
            self.promote()
        message = str(caught.value)
        assert "\n" not in message and "#1" in message  # one line naming the pull request
        return message

    def refused_before_re_verifying(self) -> str:
        """A refusal before any device time: nothing re-verified, no status posted, nothing merged or queued."""
        message = self.refused()
        assert "nothing was re-verified" in message and self.verified == []
        assert self.fake.calls("POST", r"/repos/acme/trainer/statuses/[0-9a-f]+") == []
        assert self.fake.calls("PUT", "/repos/acme/trainer/pulls/1/merge") == [] and not self.fake.queued
        return message

    def merge_methods_sent(self) -> list[str]:
        return [c.body["merge_method"] for c in self.fake.calls("PUT", "/repos/acme/trainer/pulls/1/merge")]

    def set_merge_method(self, method: str) -> None:
        """``[apply] merge_method`` in the contract promote reads."""
        contract = self.repo / "infrarsi.toml"
        contract.write_text(contract.read_text(encoding="utf-8") + f'\n[apply]\nmerge_method = "{method}"\n',
                            encoding="utf-8")

    def landed(self, result: PromoteResult, parents: int) -> None:
        """The merge landed the approved head's tree exactly, with ``parents`` parents, the first the base."""
        git = pygit2.Repository(str(self.fake.bare))
        commit = git.get(result.merge_commit)
        assert commit.tree_id == git.get(result.head_sha).tree_id and len(commit.parent_ids) == parents
        assert str(commit.parent_ids[0]) == result.base_sha == self.verified[-1]
        self.assert_base_holds_an_approved_tree({"alice", "bob", "carol"})

    def head(self) -> str:
        sha = self.fake.branch(BRANCH)
        assert sha is not None
        return sha

    def approve(self, login: str | None = "alice", sha: str | None = None) -> str:
        sha = sha or self.head()
        self.fake.add_review(1, login, "APPROVED", sha)
        return sha

    def server_commit(self, branch: str, files: dict[str, str]) -> str:
        """Someone else's commit on the server's ``branch`` (a merged human pull request, a push)."""
        git = pygit2.Repository(str(self.fake.bare))
        parent = git.get(git.references[f"refs/heads/{branch}"].target)
        builder = git.TreeBuilder(parent.tree)
        for name, text in files.items():
            builder.insert(name, git.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
        sha = git.create_commit(f"refs/heads/{branch}", HUMAN, HUMAN, "a human change", builder.write(),
                                [parent.id])
        return str(sha)

    def before_merge_commit(self, files: dict[str, str]) -> None:
        self.server_commit("main", files)

    def assert_base_holds_an_approved_tree(self, approvers: set[str]) -> None:
        """The invariant: the base's tree is exactly the tree of a commit a listed approver approved."""
        git = pygit2.Repository(str(self.fake.bare))
        approved = {git.get(r["commit_id"]).tree_id for r in self.fake.state.reviews.get(1, [])
                    if r["state"] == "APPROVED" and r["user"] and r["user"]["login"] in approvers}
        tip = git.get(git.references["refs/heads/main"].target)
        assert tip.tree_id in approved


@dataclass(frozen=True)
class Applied:
    root: Path  # copy/tinygpt (the bot's clone) and server/ (the fake's git root)
    state: State  # the server's pull request, review requests, labels after ``apply``


@pytest.fixture(scope="module")
def applied(promoted_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Applied:  # noqa: F811
    """``apply`` once on the GitHub forge (pull request #1); every scenario starts from a copy of it."""
    root = tmp_path_factory.mktemp("applied")
    repo = clone_template(promoted_template, root / "copy")
    fake = FakeGitHub(root / "server").start()
    try:
        pygit2.Repository(str(repo)).remotes.set_url("origin", fake.clone_url)
        forge = _forge(fake)
        forge.push(repo, "main")
        result = apply_run(repo, workspace=GitWorkspace(repo), forge=forge, say=lambda line: None)
        assert result.pull_request is not None and result.pull_request.number == 1
        return Applied(root=root, state=copy.deepcopy(fake.state))
    finally:
        fake.stop()


def _forge(fake: FakeGitHub) -> GitHubForge:
    return GitHubForge(GitHubTarget(owner="acme", repo="trainer", base_url=fake.url), TOKEN,
                       policy=RetryPolicy(sleep=lambda s: None))


@pytest.fixture
def scene(applied: Applied, tmp_path: Path) -> Iterator[Scene]:
    shutil.copytree(applied.root, tmp_path / "w", symlinks=True)
    repo = tmp_path / "w" / "copy" / "tinygpt"
    fake = FakeGitHub(tmp_path / "w" / "server").start()
    fake.state = copy.deepcopy(applied.state)
    try:
        pygit2.Repository(str(repo)).remotes.set_url("origin", fake.clone_url)
        yield Scene(repo=repo, fake=fake, forge=_forge(fake))
    finally:
        fake.stop()


def _apply(s: Scene, **kwargs: object) -> None:
    result = apply_run(s.repo, workspace=GitWorkspace(s.repo), forge=s.forge, say=s.said.append,
                       **kwargs)  # type: ignore[arg-type]
    assert result.pull_request is not None and result.pull_request.number == 1


def test_base_unchanged_merges_the_approved_head(scene: Scene) -> None:
    base = scene.fake.branch("main")
    head = scene.approve()
    result = scene.promote()
    assert (result.merge_commit, result.head_sha, result.base_sha) == (scene.fake.branch("main"), head, base)
    assert scene.verified == [base]
    pr = scene.forge.get_pr(1)
    assert pr.state == "merged" and scene.fake.state.statuses[head][-1]["state"] == "success"
    (merge,) = scene.fake.calls("PUT", "/repos/acme/trainer/pulls/1/merge")
    assert merge.body["sha"] == head and merge.body["merge_method"] == "merge"
    scene.assert_base_holds_an_approved_tree({"alice"})


def test_base_moved_before_approval_the_rerun_apply_re_creates_and_the_approval_merges(scene: Scene) -> None:
    first = scene.head()
    moved = scene.server_commit("main", {"CHANGELOG.md": "a human change\n"})
    assert scene.forge.fetch(scene.repo, ("main",)) == {"main": moved}
    set_branch(scene.repo, "main", moved)  # the bot's scheduled run starts from the current base
    _apply(scene)
    head = scene.head()
    assert head != first and list(pygit2.Repository(str(scene.fake.bare)).get(head).parent_ids) == [
        pygit2.Oid(hex=moved)]
    scene.approve(sha=head)
    result = scene.promote()
    assert result.merge_commit and not result.recreated and scene.verified == [moved]
    scene.assert_base_holds_an_approved_tree({"alice"})


def test_base_moved_after_approval_re_creates_verifies_pushes_asks_again_and_stops(scene: Scene) -> None:
    approved = scene.approve()
    moved = scene.server_commit("main", {"CHANGELOG.md": "a human change\n"})
    result = scene.promote()  # the local origin/main is stale: only the (token) fetch sees the move
    assert result.merge_commit is None and result.recreated and scene.verified == [moved]
    new = scene.head()
    assert new == result.head_sha != approved and scene.fake.branch("main") == moved  # nothing merged
    assert scene.fake.calls("PUT", "/repos/acme/trainer/pulls/1/merge") == []
    assert scene.fake.state.statuses[new][-1]["state"] == "success"
    assert scene.fake.calls("POST", "/repos/acme/trainer/pulls/1/requested_reviewers")[-1].body == {
        "reviewers": ["alice"]}  # the team is still requested: nobody of it reviewed
    assert any("Approve " + new[:10] in line for line in scene.said)
    with pytest.raises(PromoteError, match="is for an older head"):  # the old approval does not carry over
        scene.promote()
    scene.approve(sha=new)
    done = scene.promote()
    assert done.merge_commit == scene.fake.branch("main") and done.head_sha == new
    assert scene.verified == [moved, moved]
    scene.assert_base_holds_an_approved_tree({"alice"})


def test_base_moved_during_the_re_verification_is_not_merged(scene: Scene) -> None:
    scene.approve()
    base = scene.fake.branch("main")
    scene.during.append({"CHANGELOG.md": "landed meanwhile\n"})
    message = scene.refused()
    assert "moved to" in message and f"during the re-verification on {base[:10]}" in message
    assert scene.verified == [base] and scene.forge.get_pr(1).state == "open"
    assert scene.fake.calls("PUT", "/repos/acme/trainer/pulls/1/merge") == []


def test_private_repository_fetch_without_contents_access_stops_loudly(scene: Scene) -> None:
    scene.approve()
    scene.fake.git_token = "a-token-with-contents-read"  # the API token cannot read the repository's git
    message = scene.refused()
    assert "cannot fetch main and infrarsi/promote/r1" in message and "/git/acme/trainer.git" in message
    assert "not merging on a stale base" in message and scene.verified == []


def test_a_deleted_reviewer_is_one_line_from_the_cli(scene: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    scene.approve(login=None)  # the approving account was deleted: "user": null
    monkeypatch.setenv("INFRARSI_GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("INFRARSI_GITHUB_URL", scene.fake.url)
    result = infrarsi("promote", str(scene.repo), "--pr", "1", "--forge", "github")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: pull request #1: approved by (deleted account), who is not a listed approver")
    assert scene.forge.get_pr(1).state == "open"


def test_a_draft_is_refused_before_any_re_verification(scene: Scene) -> None:
    scene.fake.state.pulls[1]["draft"] = True  # a human converted it to a draft
    scene.approve()
    assert "is a draft" in scene.refused() and scene.verified == []
    scene.fake.required_checks["main"] = ["ci/test"]
    scene.fake.state.pulls[1]["draft"] = False
    assert "required status check 'ci/test': missing on head" in scene.refused() and scene.verified == []


def test_a_squash_only_repository_lands_the_approved_tree_when_its_settings_show(scene: Scene) -> None:
    scene.fake.merge_methods = {"squash"}
    base = scene.fake.branch("main")
    scene.approve()
    result = scene.promote()
    landed = pygit2.Repository(str(scene.fake.bare)).get(result.merge_commit)
    assert [str(p) for p in landed.parent_ids] == [base]
    assert scene.fake.calls("PUT", "/repos/acme/trainer/pulls/1/merge")[0].body["merge_method"] == "squash"
    scene.assert_base_holds_an_approved_tree({"alice"})


# -- repository settings and branch protection (issue 38): each merges the right way or refuses before device time --

def test_squash_only_with_a_token_that_cannot_see_the_settings_falls_back_on_the_405(scene: Scene) -> None:
    """The reported case: no allow_* keys for this token, "Allow merge commits" off."""
    scene.fake.can_administer, scene.fake.merge_methods = False, {"squash"}
    scene.approve()
    result = scene.promote()
    assert scene.merge_methods_sent() == ["merge", "squash"] and result.method == "squash"
    assert any("cannot read which merge methods the repository allows" in line for line in scene.said)
    assert any("the forge refused merge (GitHub: 405 Merge commits are not allowed on this repository.); trying "
               "squash" in line for line in scene.said)
    assert any("merged into main by squash" in line for line in scene.said) and len(scene.verified) == 1
    scene.landed(result, parents=1)


def test_rebase_only_tries_each_method_once(scene: Scene) -> None:
    scene.fake.can_administer, scene.fake.merge_methods = False, {"rebase"}
    scene.approve()
    result = scene.promote()
    assert scene.merge_methods_sent() == ["merge", "squash", "rebase"] and result.method == "rebase"
    scene.landed(result, parents=1)


def test_merge_only_merges_with_a_merge_commit(scene: Scene) -> None:
    scene.fake.merge_methods = {"merge"}
    scene.approve()
    result = scene.promote()
    assert scene.merge_methods_sent() == ["merge"] and result.method == "merge"
    scene.landed(result, parents=2)


def test_a_named_method_the_repository_refuses_stops_before_re_verifying(scene: Scene) -> None:
    scene.fake.merge_methods = {"merge"}
    scene.set_merge_method("squash")
    scene.approve()
    message = scene.refused_before_re_verifying()
    assert ("merge method: [apply] merge_method = 'squash' is not allowed (the repository's allow_squash_merge is "
            "false); set it to 'auto' or a method main allows") in message


def test_a_required_check_still_pending_stops_before_re_verifying(scene: Scene) -> None:
    scene.fake.protect("main", checks=("ci/test",))
    head = scene.approve()
    scene.fake.add_check_run(head, "ci/test", status="in_progress")
    message = scene.refused_before_re_verifying()
    assert message.endswith(f"required status check 'ci/test': pending on head {head[:10]}")
    scene.fake.add_check_run(head, "ci/test", conclusion="success")
    scene.landed(scene.promote(), parents=2)


def test_two_approvals_required_with_one_given_stops_before_re_verifying(scene: Scene) -> None:
    scene.fake.protect("main", approvals=2)
    scene.approve("alice")
    assert scene.refused_before_re_verifying().endswith("required approving reviews: 2 needed, 1 given (alice)")
    scene.approve("bob")
    scene.landed(scene.promote(), parents=2)


@pytest.mark.parametrize(("where", "administer", "sent"), [
    ("classic", True, ["squash"]), ("ruleset", False, ["squash"]), ("classic", False, ["merge", "squash"])])
def test_linear_history_squashes(scene: Scene, where: str, administer: bool, sent: list[str]) -> None:
    """Read from the protection (or a ruleset, which any token reads): squash first. Not readable: GitHub's
    405 for the merge commit is the answer, and squash follows."""
    if where == "classic":
        scene.fake.protect("main", linear=True)
    else:
        scene.fake.add_rule("main", "required_linear_history")
    scene.fake.can_administer = administer
    scene.approve()
    result = scene.promote()
    assert scene.merge_methods_sent() == sent and result.method == "squash"
    scene.landed(result, parents=1)


def test_a_merge_queue_gets_the_pull_request_instead_of_a_merge(scene: Scene) -> None:
    scene.fake.add_merge_queue_rule("main", "SQUASH")
    scene.approve()
    result = scene.promote()
    assert result.queued and result.merge_commit is None and len(scene.verified) == 1
    assert scene.fake.queued == {"main": [1]} and scene.merge_methods_sent() == []
    (enqueue,) = [c for c in scene.fake.calls("POST", "/api/graphql") if "enqueuePullRequest" in c.body["query"]]
    assert enqueue.body["variables"] == {"pullRequestId": "PR_1", "expectedHeadOid": result.head_sha}
    assert scene.fake.state.statuses[result.head_sha][-1]["state"] == "success"
    assert any("is in main's merge queue (position 1, queued" in line for line in scene.said)


def test_a_merge_queue_with_another_method_than_the_named_one_stops_before_re_verifying(scene: Scene) -> None:
    scene.fake.add_merge_queue_rule("main", "SQUASH")
    scene.set_merge_method("merge")
    scene.approve()
    assert "merge queue: main merges through a merge queue that lands with squash; [apply] merge_method = 'merge' " \
           "cannot be honoured" in scene.refused_before_re_verifying()


def test_code_owner_review_missing_stops_before_re_verifying(scene: Scene) -> None:
    scene.fake.protect("main", code_owners=True)
    scene.server_commit("main", {"CODEOWNERS": "*.py @carol\ninfrarsi.* @acme/perf\n"})
    scene.fake.teams["perf"] = {"dave"}
    scene.approve()
    message = scene.refused_before_re_verifying()
    assert message.endswith("code-owner review (CODEOWNERS): infrarsi.lock, infrarsi.toml need an approval by "
                            "@acme/perf; model.py, train.py need an approval by @carol")
    scene.approve("carol")
    scene.approve("dave")
    assert scene.promote().recreated  # past the gate: main moved, so the commit is re-created for a new approval


def test_a_base_that_moves_as_the_merge_lands_is_caught_by_the_tree_check(scene: Scene) -> None:
    """GitHub's merge has no guard on the base: the one window. The landed tree is checked, and it is said."""
    scene.approve()
    scene.fake.before_merge = lambda: scene.before_merge_commit({"CHANGELOG.md": "meanwhile\n"})
    message = scene.refused()
    assert "merged as" in message and "is not the approved tree" in message and "revert it" in message


def test_a_team_members_approval_counts_and_a_non_members_does_not(scene: Scene) -> None:
    scene.fake.teams["perf"] = {"carol"}
    scene.approve("mallory")
    assert "approved by mallory, who is not a listed approver" in scene.refused()
    scene.approve("carol")
    result = scene.promote()
    assert result.merge_commit and any("approved by carol" in line for line in scene.said)
    assert {c.path for c in scene.fake.requests if "/teams/" in c.path} == {
        "/orgs/acme/teams/perf/memberships/mallory", "/orgs/acme/teams/perf/memberships/carol"}
    scene.assert_base_holds_an_approved_tree({"carol"})


def test_a_human_push_to_the_promotion_branch_stops_it(scene: Scene) -> None:
    scene.server_commit(BRANCH, {"NOTES.md": "mine\n"})
    scene.approve()
    message = scene.refused()
    assert "has commits by someone else" in message and "Dana Human" in message
    assert scene.verified == [] and scene.forge.get_pr(1).state == "open"


# -- what travels with the pull request: its links resolve on the server; a fresh clone can promote ----------

WORKFLOW = Path(__file__).resolve().parents[1] / "workflows" / "infrarsi-promote.yml"


def test_every_link_and_ref_in_the_body_exists_on_the_server(scene: Scene) -> None:
    _apply(scene)  # again, on this test's server: the body names its address
    body = scene.forge.get_pr(1).body
    assert ".infrarsi/" not in body  # nothing that lives only on the search's machine
    git = pygit2.Repository(str(scene.fake.bare))
    web = f"{scene.fake.url}/acme/trainer/blob/"
    links = re.findall(re.escape(web) + r"([^\s)]+)", body)
    assert {link.rsplit("/", 1)[-1] for link in links} >= {"report.md", "winner.diff"}
    for link in links:  # as GitHub resolves blob/<ref>/<path>: the longest prefix that names a branch
        parts = link.split("/")
        ref = next(i for i in range(len(parts) - 1, 0, -1) if scene.fake.branch("/".join(parts[:i])))
        commit = git.get(scene.fake.branch("/".join(parts[:ref]))).peel(pygit2.Commit)
        assert "/".join(parts[ref:]) in commit.tree
        assert commit.parent_ids  # the record commit carries the trial commit as its parent
    branches = re.findall(r"git checkout (\S+)", body)
    assert branches and all(scene.fake.branch(b) is not None for b in branches)


def _workflow_step(name: str) -> dict[str, object]:
    jobs = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]
    return next(step for step in jobs["promote"]["steps"] if step.get("name") == name)


def test_the_promote_workflow_merges_from_a_fresh_clone(scene: Scene, tmp_path: Path) -> None:
    """The workflow's steps: a checkout of the base without persisted credentials, then its Promote step's
    command with its environment (in process, so the re-verification is the recorder)."""
    head = scene.approve()
    base = scene.fake.branch("main")
    fresh = tmp_path / "checkout"
    authed = scene.fake.clone_url.replace("http://", f"http://x-access-token:{TOKEN}@", 1)
    git(fresh.parent, "clone", "-q", "--branch", "main", authed, str(fresh))
    git(fresh, "remote", "set-url", "origin", scene.fake.clone_url)
    assert not (fresh / ".infrarsi").exists()
    step = _workflow_step("Promote")
    # exit 4 (not yet: waiting for an approval of a re-created commit) is not a failed job; see docs/github.md
    assert step["run"] == 'infrarsi promote . --forge github --pr "$PR_NUMBER" --executor actions || test $? -eq 4'
    env = {"INFRARSI_GITHUB_TOKEN": TOKEN, "INFRARSI_GITHUB_REPOSITORY": "acme/trainer",
           "INFRARSI_GITHUB_URL": scene.fake.url}
    assert set(env) <= set(step["env"])  # type: ignore[arg-type]
    forge = forge_for_repo(fresh, environ=env, policy=RetryPolicy(sleep=lambda s: None))
    said: list[str] = []
    result = promote(fresh, 1, workspace=GitWorkspace(fresh), forge=forge, reverify=scene.reverify,
                     say=said.append, executor="actions")
    assert result.merge_commit == scene.fake.branch("main") and result.head_sha == head
    assert scene.verified == [base] and any("restored from infrarsi/record/r1" in line for line in said)
    scene.assert_base_holds_an_approved_tree({"alice"})
