"""The GitHub forge against a local server speaking GitHub's REST API and git smart HTTP.

The contract suite (tests/support/forge_contract.py) runs here over the GitHub forge;
the tests below it assert on the exact requests the forge sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2

import pytest

from bot.forges import open_forge
from bot.forges.github import GitHubForge, forge_for_repo, target_from_remote_url
from tests.support.repos import init_repo
from bot.forges.github_api import GitHubTarget, RetryPolicy
from infrarsi.seams.forge import (
    CheckState,
    Forge,
    ForgeError,
    ForgeUnavailable,
    MergeMethod,
    MergeMethodRefused,
    PullRequestDraft,
    QueueEntry,
    ReviewState,
    StatusState,
    approvals,
)
from tests.support.fake_github import TOKEN, FakeGitHub
from tests.support.forge_contract import *  # noqa: F401,F403  (the contract's test functions)
from tests.support.repos import commit_on


@dataclass
class GitHubHarness:
    forge: Forge
    repo: Path
    fake: FakeGitHub

    def submit_review(self, number: int, login: str, state: ReviewState, commit_sha: str) -> None:
        self.fake.add_review(number, login, state, commit_sha)

    def close_pr(self, number: int) -> None:
        self.fake.handle_api("PATCH", f"/repos/acme/trainer/pulls/{number}", {}, {"state": "closed"})

    def remote_branch(self, branch: str) -> str | None:
        return self.fake.branch(branch)

    def comments(self, number: int) -> list[str]:
        return [c["body"] for c in sorted(self.fake.state.comments.values(), key=lambda c: c["id"])
                if c["issue"] == number]

    def statuses(self, sha: str) -> dict[str, StatusState]:
        latest: dict[str, StatusState] = {}
        for s in self.fake.state.statuses.get(sha, []):
            latest[s["context"]] = s["state"]
        return latest

    def allow_merge_methods(self, methods: tuple[MergeMethod, ...]) -> None:
        self.fake.merge_methods = set(methods)

    def require_approvals(self, branch: str, count: int) -> None:
        self.fake.protect(branch, approvals=count)


class Clock:
    """An injected clock and sleep: waits are recorded, never slept."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    server = FakeGitHub(tmp_path / "server").start()
    yield server
    server.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_forge(fake: FakeGitHub, clock: Clock, token: str = TOKEN) -> GitHubForge:
    return GitHubForge(GitHubTarget(owner="acme", repo="trainer", base_url=fake.url), token,
                       policy=RetryPolicy(sleep=clock.sleep, clock=lambda: clock.now))


@pytest.fixture
def forge_harness(fake: FakeGitHub, clock: Clock, tmp_path: Path) -> GitHubHarness:
    repo = tmp_path / "local"
    init_repo(repo, {"train.py": "print('train')\n"})
    forge = make_forge(fake, clock)
    forge.push(repo, "main")
    return GitHubHarness(forge=forge, repo=repo, fake=fake)


def _draft(**changes: object) -> PullRequestDraft:
    fields: dict[str, object] = dict(head="infrarsi/promote/r1", base="main", title="InfraRSI: 1.20x faster step",
                                     body="<!-- infrarsi:run=r1 -->\nverified 1.20x\n",
                                     labels=("infrarsi", "performance"))
    fields.update(changes)
    return PullRequestDraft(**fields)  # type: ignore[arg-type]


def test_ensure_pr_twice_is_one_pr_updated_once_with_exact_payloads(forge_harness: GitHubHarness) -> None:
    h, fake = forge_harness, forge_harness.fake
    commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=bf16\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    pr, action = h.forge.ensure_pr(_draft())
    assert action == "created"
    h.forge.request_review(pr.number, ("alice",), ("acme/perf",))
    body2 = "<!-- infrarsi:run=r1 -->\nverified 1.22x\n"
    again, action = h.forge.ensure_pr(_draft(body=body2))  # the second `infrarsi apply` of the same run
    assert (again.number, action) == (pr.number, "updated")
    assert h.forge.ensure_pr(_draft(body=body2))[1] == "unchanged"

    creates = fake.calls("POST", "/repos/acme/trainer/pulls")
    assert [c.body for c in creates] == [{"title": "InfraRSI: 1.20x faster step", "base": "main",
                                         "head": "infrarsi/promote/r1",
                                         "body": "<!-- infrarsi:run=r1 -->\nverified 1.20x\n"}]
    assert [c.body for c in fake.calls("POST", r"/repos/acme/trainer/issues/\d+/labels")] == [
        ["infrarsi", "performance"]]
    assert [c.body for c in fake.calls("POST", r"/repos/acme/trainer/pulls/\d+/requested_reviewers")] == [
        {"reviewers": ["alice"], "team_reviewers": ["perf"]}]
    assert [c.body for c in fake.calls("PATCH", r"/repos/acme/trainer/pulls/\d+")] == [{"body": body2}]
    lookups = fake.calls("GET", "/repos/acme/trainer/pulls")
    assert len(lookups) == 3 and all(c.query["head"] == ["acme:infrarsi/promote/r1"] for c in lookups)
    assert all(c.headers["Authorization"] == f"token {TOKEN}" for c in fake.requests)
    assert len(fake.state.pulls) == 1


def test_a_pr_opened_meanwhile_is_updated_not_duplicated(forge_harness: GitHubHarness) -> None:
    h, fake = forge_harness, forge_harness.fake
    commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=bf16\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    first, _ = h.forge.ensure_pr(_draft())
    fake.inject("GET", "/repos/acme/trainer/pulls", 200, body=[])  # a search that lags behind the create
    again, action = h.forge.ensure_pr(_draft(title="InfraRSI: 1.25x faster step"))
    assert (again.number, action, again.title) == (first.number, "updated", "InfraRSI: 1.25x faster step")
    assert len(fake.state.pulls) == 1 and len(fake.calls("POST", "/repos/acme/trainer/pulls")) == 2


def test_a_draft_pr_goes_through_the_raw_session(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=bf16\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft(draft=True, labels=()))
    assert pr.draft
    (create,) = h.fake.calls("POST", "/repos/acme/trainer/pulls")
    assert create.body["draft"] is True and create.headers["X-GitHub-Api-Version"] == "2022-11-28"


def test_merge_sends_the_expected_head_and_message(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    sha = commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=bf16\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft())
    merged = h.forge.merge(pr.number, expected_head_sha=sha, message="InfraRSI: promote r1\n\n1.2x verified")
    (call,) = h.fake.calls("PUT", rf"/repos/acme/trainer/pulls/{pr.number}/merge")
    assert call.body == {"sha": sha, "merge_method": "merge", "commit_title": "InfraRSI: promote r1",
                         "commit_message": "1.2x verified"}
    assert h.fake.branch("main") == merged


def test_status_payload(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    sha = h.fake.branch("main")
    assert sha is not None
    h.forge.set_status(sha, context="infrarsi/verify", state="success", description="1.2x verified")
    (call,) = h.fake.calls("POST", f"/repos/acme/trainer/statuses/{sha}")
    assert call.body == {"state": "success", "description": "1.2x verified", "context": "infrarsi/verify"}


def test_a_403_rate_limit_is_retried_after_the_stated_time(forge_harness: GitHubHarness, clock: Clock) -> None:
    h, fake = forge_harness, forge_harness.fake
    limited = {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}
    fake.inject("GET", "/repos/acme/trainer/pulls", 403, headers={"Retry-After": "37"}, body=limited)
    fake.inject("GET", "/repos/acme/trainer/pulls", 403, body={"message": "API rate limit exceeded"},
                headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(clock.now) + 120)})
    assert h.forge.find_pr("infrarsi/promote/none") is None
    assert clock.slept == [37.0, 120 - 37 + 1.0]  # the reset is absolute: the first wait counts
    assert len(fake.calls("GET", "/repos/acme/trainer/pulls")) == 3


def test_a_secondary_limit_without_headers_backs_off_and_a_plain_403_is_not_retried(
        forge_harness: GitHubHarness, clock: Clock) -> None:
    h, fake = forge_harness, forge_harness.fake
    fake.inject("GET", "/repos/acme/trainer/pulls", 403, body={"message": "You have exceeded a secondary rate limit"})
    assert h.forge.find_pr("x") is None
    assert clock.slept == [60.0]
    fake.inject("GET", "/repos/acme/trainer/pulls", 403, body={"message": "Resource not accessible by integration"})
    with pytest.raises(ForgeError, match="403"):
        h.forge.find_pr("x")
    assert clock.slept == [60.0]


def test_a_502_then_200_on_a_get_is_retried_and_succeeds(forge_harness: GitHubHarness, clock: Clock) -> None:
    h, fake = forge_harness, forge_harness.fake
    fake.inject("GET", "/repos/acme/trainer/pulls", 502, body={"message": "Server Error"})
    fake.inject("GET", "/repos/acme/trainer/pulls", 0)  # then a connection dropped before any answer
    assert h.forge.find_pr("infrarsi/promote/none") is None
    assert len(fake.calls("GET", "/repos/acme/trainer/pulls")) == 3
    assert clock.slept == [2.0]  # urllib3's backoff: none before the first retry, then backoff_s x 2


def test_a_5xx_on_a_post_is_not_retried_and_says_retry_later(forge_harness: GitHubHarness, clock: Clock) -> None:
    """A POST that got a 5xx may have been done: sending it again could post the comment twice."""
    h, fake = forge_harness, forge_harness.fake
    fake.inject("POST", r"/repos/acme/trainer/statuses/\w+", 502, body={"message": "Server Error"})
    with pytest.raises(ForgeUnavailable, match="502 Server Error; retry later") as caught:
        h.forge.set_status("a" * 40, context="infrarsi/verify", state="success", description="ok")
    assert caught.value.exit_code == 3 and isinstance(caught.value, ForgeError)
    assert len(fake.calls("POST", r"/repos/acme/trainer/statuses/\w+")) == 1 and clock.slept == []


def test_a_get_that_keeps_failing_exits_3_after_its_retries(forge_harness: GitHubHarness, clock: Clock) -> None:
    h, fake = forge_harness, forge_harness.fake
    fake.inject("GET", "/repos/acme/trainer/pulls/7", 0, times=10)
    with pytest.raises(ForgeUnavailable, match="no answer .*tried 5 times; retry later") as caught:
        h.forge.get_pr(7)
    assert caught.value.exit_code == 3
    assert len(fake.calls("GET", "/repos/acme/trainer/pulls/7")) == 5 and clock.slept == [2.0, 4.0, 8.0]


def test_a_command_whose_forge_stays_down_exits_3(fake: FakeGitHub, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
    from bot.cli import main
    from tests.support.contracts import write_contract

    repo = tmp_path / "repo"
    write_contract(repo)
    init_repo(repo, {"train.py": "print('train')\n"})
    pygit2.Repository(str(repo)).remotes.create("origin", fake.clone_url)
    for name, value in (("INFRARSI_GITHUB_TOKEN", TOKEN), ("INFRARSI_GITHUB_URL", fake.url),
                        ("INFRARSI_GITHUB_RETRIES", "1")):
        monkeypatch.setenv(name, value)
    fake.inject("GET", r".*", 503, body={"message": "Service Unavailable"}, times=10**6)
    assert main(["promote", str(repo), "--forge", "github", "--pr", "1"]) == 3
    assert capsys.readouterr().err.strip().endswith("pulls/1: 503 Service Unavailable; retry later")
    assert len(fake.calls("GET", "/repos/acme/trainer/pulls/1")) == 2  # once, and its one retry
    monkeypatch.setenv("INFRARSI_GITHUB_RETRIES", "many")
    assert main(["promote", str(repo), "--forge", "github", "--pr", "1"]) == 2
    assert "INFRARSI_GITHUB_RETRIES: expected a whole number" in capsys.readouterr().err


def test_lists_are_read_page_by_page_through_the_link_header(forge_harness: GitHubHarness) -> None:
    h, fake = forge_harness, forge_harness.fake
    commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=bf16\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft())
    for i in range(230):
        fake.handle_api("POST", f"/repos/acme/trainer/issues/{pr.number}/comments", {}, {"body": f"comment {i}"})
    h.forge.ensure_comment(pr.number, "<!-- marker -->", "<!-- marker --> the bot's")
    reads = fake.calls("GET", rf"/repos/acme/trainer/issues/{pr.number}/comments")
    assert [r.query.get("page", ["1"])[0] for r in reads] == ["1", "2", "3"]
    assert len(h.comments(pr.number)) == 231


def test_a_bad_token_fails_the_push_after_a_bounded_number_of_attempts(
        fake: FakeGitHub, clock: Clock, tmp_path: Path) -> None:
    repo = tmp_path / "local"
    init_repo(repo, {"a.txt": "a\n"})
    forge = GitHubForge(GitHubTarget(owner="acme", repo="trainer", base_url=fake.url), "wrong-token",
                        policy=RetryPolicy(sleep=clock.sleep), push_url=fake.clone_url)
    with pytest.raises(ForgeError, match="authentication"):
        forge.push(repo, "main")
    assert 1 <= fake.git_auth_failures <= 2
    assert fake.branch("main") is None


def test_a_ref_the_server_rejects_is_named(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    hook = h.fake.bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n  case $ref in refs/heads/protected*) "
                    "echo 'protected by policy' >&2; exit 1;; esac\ndone\n")
    hook.chmod(0o755)
    commit_on(h.repo, "protected/x", {"a.txt": "a\n"})
    with pytest.raises(ForgeError, match="refs/heads/protected/x"):
        h.forge.push(h.repo, "protected/x")
    assert h.fake.branch("protected/x") is None


def test_enterprise_base_url_is_the_api_root(fake: FakeGitHub, clock: Clock) -> None:
    forge = make_forge(fake, clock)
    assert forge.client.api_root == fake.url + "/api/v3"
    assert forge.repo.clone_url == fake.clone_url
    public = GitHubForge(GitHubTarget.parse("acme/trainer"), TOKEN)
    assert public.client.repo_url == "https://api.github.com/repos/acme/trainer"



@pytest.mark.parametrize(("url", "owner", "name", "base", "push"), [
    ("https://github.com/acme/trainer.git", "acme", "trainer", None, "https://github.com/acme/trainer.git"),
    ("https://x-access-token:abc@github.com/acme/trainer", "acme", "trainer", None,
     "https://github.com/acme/trainer"),
    ("git@github.com:acme/trainer.git", "acme", "trainer", None, None),
    ("https://ghe.example.com/ml/trainer.git", "ml", "trainer", "https://ghe.example.com",
     "https://ghe.example.com/ml/trainer.git"),
    ("ssh://git@ghe.example.com/ml/trainer.git", "ml", "trainer", "https://ghe.example.com", None),
])
def test_the_repository_is_read_from_the_remote_url(url: str, owner: str, name: str, base: str | None,
                                                    push: str | None) -> None:
    target, push_url = target_from_remote_url(url)
    assert (target.owner, target.repo, target.base_url, push_url) == (owner, name, base, push)


def test_the_registry_factory_uses_the_remote_and_the_token_env(fake: FakeGitHub, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "local"
    init_repo(repo, {"a.txt": "a\n"})
    pygit2.Repository(str(repo)).remotes.create("origin", fake.clone_url)
    with pytest.raises(ForgeError, match="INFRARSI_GITHUB_TOKEN"):
        forge_for_repo(repo, environ={})
    forge = forge_for_repo(repo, environ={"GITHUB_TOKEN": TOKEN})
    assert forge.client.api_root == fake.url + "/api/v3"
    assert forge.push(repo, "main") == fake.branch("main")
    assert forge.find_pr("nothing") is None
    monkeypatch.setenv("INFRARSI_GITHUB_TOKEN", TOKEN)
    assert isinstance(open_forge("github", repo), GitHubForge)  # the registry's entry


# -- GitHub as it is (issue 17): nullable fields, case, reopen, merge methods, checks, teams, fetches ----------


def _opened(h: GitHubHarness, **changes: object) -> tuple[int, str]:
    sha = commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=bf16\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft(**changes))
    return pr.number, sha


def test_a_deleted_reviewer_is_a_review_that_never_counts(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    n, sha = _opened(h)
    h.fake.add_review(n, None, "APPROVED", sha)  # GitHub: "user": null for a deleted account
    h.fake.add_review(n, "alice", "COMMENTED", sha)
    reviews = h.forge.reviews(n)
    assert [(r.login, r.state) for r in reviews] == [("(deleted account)", "APPROVED"), ("alice", "COMMENTED")]
    assert approvals(reviews, sha, frozenset({"alice", "ghost"})) == ()
    (call,) = h.fake.calls("GET", rf"/repos/acme/trainer/pulls/{n}/reviews")
    assert call.query["per_page"] == ["100"]


def test_label_names_are_compared_without_case(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    n, _ = _opened(h, labels=())
    h.fake.state.pulls[n]["labels"] = ["Performance", "INFRARSI"]  # the repository's own labels
    assert h.forge.ensure_pr(_draft(labels=()))[1] == "unchanged"
    assert h.forge.ensure_pr(_draft())[1] == "unchanged"
    assert h.fake.calls("POST", rf"/repos/acme/trainer/issues/{n}/labels") == []


def test_reopen_before_the_push_and_recreate_after_a_force_push(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    n, _ = _opened(h)
    h.close_pr(n)
    pr, action = h.forge.ensure_pr(_draft(), reopen=True)  # the branch is as it was when closed: reopened
    assert (pr.number, pr.state, action) == (n, "open", "updated")
    h.close_pr(n)
    commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=fp32\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1", force=True)
    pr, action = h.forge.ensure_pr(_draft(), reopen=True)  # GitHub refuses (422): a new pull request instead
    assert (pr.number, pr.state, action) == (n + 1, "open", "created")
    assert h.fake.state.pulls[n]["state"] == "closed"


def test_the_method_asked_for_is_sent_and_a_405_for_it_is_a_refused_method(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    h.fake.merge_methods = {"rebase"}
    n, sha = _opened(h)
    with pytest.raises(MergeMethodRefused) as refused:
        h.forge.merge(n, expected_head_sha=sha, message="InfraRSI: promote r1", method="squash")
    assert refused.value.method == "squash" and "405 Squash merges are not allowed" in refused.value.reason
    merged = h.forge.merge(n, expected_head_sha=sha, message="InfraRSI: promote r1", method="rebase")
    assert [c.body["merge_method"] for c in h.fake.calls("PUT", rf"/repos/acme/trainer/pulls/{n}/merge")] == [
        "squash", "rebase"]
    assert h.fake.branch("main") == merged


def test_a_405_that_is_not_about_the_method_is_a_plain_refusal(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    h.fake.protect("main", approvals=1)
    n, sha = _opened(h)
    with pytest.raises(ForgeError, match="At least 1 approving reviews are required") as refused:
        h.forge.merge(n, expected_head_sha=sha, message="m")
    assert not isinstance(refused.value, MergeMethodRefused)


def test_merge_rules_read_a_draft_s_base_checks_and_leave_out_the_bots_own(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    n, sha = _opened(h, draft=True)
    h.fake.required_checks["main"] = ["ci/test", "infrarsi/verify"]
    rules = h.forge.merge_rules(h.forge.get_pr(n))
    assert rules.protected and rules.required_checks == (CheckState(context="ci/test", state="missing"),)
    h.fake.add_check_run(sha, "ci/test", status="in_progress")
    assert h.forge.merge_rules(h.forge.get_pr(n)).required_checks == (CheckState(context="ci/test", state="pending"),)
    h.fake.add_check_run(sha, "ci/test", conclusion="success")
    assert h.forge.merge_rules(h.forge.get_pr(n)).required_checks == (CheckState(context="ci/test", state="success"),)


def test_merge_rules_of_a_token_that_may_administer(forge_harness: GitHubHarness) -> None:
    """Settings, classic protection and rulesets, each shape as GitHub documents it, read together."""
    h = forge_harness
    h.fake.merge_methods = {"squash", "rebase"}
    h.fake.protect("main", checks=("ci/test",), approvals=2, code_owners=True, linear=True)
    h.fake.add_rule("main", "pull_request", {
        "allowed_merge_methods": ["squash"], "dismiss_stale_reviews_on_push": False, "require_code_owner_review":
        False, "require_last_push_approval": False, "required_approving_review_count": 1,
        "required_review_thread_resolution": False})
    h.fake.add_rule("main", "required_status_checks", {
        "required_status_checks": [{"context": "lint", "integration_id": 15368}],
        "strict_required_status_checks_policy": False})
    n, _ = _opened(h)
    rules = h.forge.merge_rules(h.forge.get_pr(n))
    assert dict(rules.refused_methods) == {"merge": "the repository's allow_merge_commit is false",
                                           "rebase": "ruleset 7 of acme/trainer allows only squash"}
    assert [c.context for c in rules.required_checks] == ["ci/test", "lint"]
    assert (rules.required_approvals, rules.code_owner_reviews, rules.linear_history, rules.merge_queue,
            rules.unread) == (2, True, True, False, ())


@pytest.mark.parametrize("denied", [403, 404])
def test_merge_rules_of_a_low_permission_token_say_what_they_could_not_read(forge_harness: GitHubHarness,
                                                                            denied: int) -> None:
    h = forge_harness
    h.fake.can_administer, h.fake.protection_denied = False, denied
    h.fake.merge_methods = {"squash"}
    h.fake.protect("main", approvals=2, linear=True)
    h.fake.add_rule("main", "required_linear_history")
    n, _ = _opened(h)
    rules = h.forge.merge_rules(h.forge.get_pr(n))
    assert "allow_merge_commit" not in h.fake.repository()
    assert rules.refused_methods == () and rules.required_approvals == 0  # not read, so not guessed
    assert rules.linear_history  # the ruleset needs only Metadata: read
    (settings, protection) = rules.unread
    assert "which merge methods the repository allows" in settings
    assert protection.startswith(f"main's branch protection ({denied} ") and "Administration: read" in protection


@pytest.mark.parametrize("where", ["ruleset", "classic"])
def test_a_merge_queue_is_read_and_enqueue_is_idempotent(forge_harness: GitHubHarness, where: str) -> None:
    h = forge_harness
    if where == "ruleset":
        h.fake.add_merge_queue_rule("main", "REBASE")
    else:
        h.fake.protect("main", merge_queue="REBASE")  # only GraphQL's mergeQueue(branch:) shows it
    n, sha = _opened(h)
    pr = h.forge.get_pr(n)
    rules = h.forge.merge_rules(pr)
    assert (rules.merge_queue, rules.queue_method) == (True, "rebase")
    assert h.forge.enqueue(pr, expected_head_sha=sha) == QueueEntry(number=n, position=1, state="QUEUED")
    assert h.forge.enqueue(pr, expected_head_sha=sha) == QueueEntry(number=n, position=1, state="QUEUED")
    mutations = [c for c in h.fake.calls("POST", "/api/graphql") if "enqueuePullRequest" in c.body["query"]]
    assert len(mutations) == 1 and mutations[0].body["variables"] == {"pullRequestId": f"PR_{n}",
                                                                      "expectedHeadOid": sha}
    assert h.fake.queued == {"main": [n]}
    h.fake.queued.clear()  # taken out of the queue (by a human, or a failed group)
    with pytest.raises(ForgeError, match="not the expected"):
        h.forge.enqueue(pr, expected_head_sha="0" * 40)


def test_no_re_request_of_a_review_given_on_the_current_head(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    n, sha = _opened(h)
    h.forge.request_review(n, ("alice", "bob"))
    h.fake.add_review(n, "alice", "APPROVED", sha)  # GitHub drops her from requested_reviewers
    h.forge.request_review(n, ("alice", "bob"))
    assert len(h.fake.calls("POST", rf"/repos/acme/trainer/pulls/{n}/requested_reviewers")) == 1
    new = commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "dtype=fp32\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    assert h.forge.get_pr(n).head_sha == new
    h.forge.request_review(n, ("alice", "bob"))  # a new head: her approval no longer covers it
    assert h.fake.calls("POST", rf"/repos/acme/trainer/pulls/{n}/requested_reviewers")[-1].body == {
        "reviewers": ["alice"]}


def test_team_membership_is_asked_of_the_org(forge_harness: GitHubHarness) -> None:
    h = forge_harness
    h.fake.teams["perf"] = {"carol"}
    assert h.forge.team_member("acme/perf", "carol") and not h.forge.team_member("acme/perf", "mallory")
    assert [c.path for c in h.fake.requests if "/teams/" in c.path] == [
        "/orgs/acme/teams/perf/memberships/carol", "/orgs/acme/teams/perf/memberships/mallory"]


def test_fetch_uses_the_token_and_fails_loudly(fake: FakeGitHub, clock: Clock, tmp_path: Path) -> None:
    repo = tmp_path / "local"
    init_repo(repo, {"a.txt": "a\n"})
    forge = make_forge(fake, clock)
    pushed = forge.push(repo, "main")
    other = tmp_path / "other"
    init_repo(other, {"b.txt": "b\n"})
    assert fake.private
    assert make_forge(fake, clock).fetch(other, ("main", "gone")) == {"main": pushed}
    assert str(pygit2.Repository(str(other)).references["refs/remotes/origin/main"].target) == pushed
    with pytest.raises(ForgeError, match=r"fetch of main from http://127\.0\.0\.1:\d+/git/acme/trainer\.git failed"):
        GitHubForge(GitHubTarget(owner="acme", repo="trainer", base_url=fake.url), "wrong-token",
                    policy=RetryPolicy(sleep=clock.sleep), push_url=fake.clone_url).fetch(other, ("main",))
    fake.private = False  # a public repository answers an anonymous fetch: the wrong token is never sent
    refused = fake.git_auth_failures
    public = GitHubForge(GitHubTarget(owner="acme", repo="trainer", base_url=fake.url), "wrong-token",
                         policy=RetryPolicy(sleep=clock.sleep), push_url=fake.clone_url)
    assert public.fetch(other, ("main",)) == {"main": pushed} and fake.git_auth_failures == refused


def test_a_path_remote_with_the_repository_variable(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = tmp_path / "local"
    init_repo(repo, {"a.txt": "a\n"})
    pygit2.Repository(str(repo)).remotes.create("origin", str(tmp_path / "elsewhere.git"))
    env = {"GITHUB_TOKEN": TOKEN, "INFRARSI_GITHUB_URL": fake.url}
    with pytest.raises(ForgeError, match="INFRARSI_GITHUB_REPOSITORY"):
        forge_for_repo(repo, environ=env)
    forge = forge_for_repo(repo, environ={**env, "INFRARSI_GITHUB_REPOSITORY": "acme/trainer"})
    assert forge.push(repo, "main") == fake.branch("main")  # to the clone URL the API reports
