"""The shared GitHub REST client's pure parts: how long a rate-limited answer asks to wait, the repository slug,
the token's variables, URLs and GitHub's error messages. Requests against the stand-in: test_forge_github.py."""

from __future__ import annotations

import json

import pytest
import requests

from urllib3.exceptions import ProtocolError

from bot.forges.github_api import (GitHubAPIError, GitHubClient, GitHubTarget, GitHubUnavailable, RetryPolicy,
                                   rate_limit_wait, token_from_env)


def _response(status: int, headers: dict[str, str] | None = None, body: object = None) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r.headers.update(headers or {})
    r._content = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return r


POLICY = RetryPolicy(secondary_backoff_s=60.0, clock=lambda: 1000.0)


@pytest.mark.parametrize("status, headers, body, attempt, wait", [
    (200, {"Retry-After": "5"}, None, 0, None),
    (403, {"Retry-After": "5"}, None, 0, 5.0),
    (429, {"Retry-After": "-3"}, None, 0, 0.0),
    (403, {"Retry-After": "soon"}, None, 0, 60.0),
    (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1030"}, None, 0, 31.0),
    (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "900"}, None, 0, 1.0),
    (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "later"}, None, 0, 60.0),
    (403, {}, {"message": "You have exceeded a secondary rate limit"}, 2, 240.0),
    (429, {}, None, 1, 120.0),
    (403, {}, {"message": "Resource not accessible by integration"}, 0, None),
])
def test_the_wait_a_rate_limited_answer_asks_for(status: int, headers: dict, body: object, attempt: int,
                                                  wait: float | None) -> None:
    assert rate_limit_wait(_response(status, headers, body), attempt=attempt, policy=POLICY) == wait


@pytest.mark.parametrize("slug, owner, repo", [("acme/widgets", "acme", "widgets"), (" acme/widgets.git ", "acme",
                                                                                       "widgets")])
def test_a_slug_is_read(slug: str, owner: str, repo: str) -> None:
    assert GitHubTarget.parse(slug) == GitHubTarget(owner=owner, repo=repo)
    assert GitHubTarget.parse(slug, "").base_url is None


@pytest.mark.parametrize("slug", ["acme", "/widgets", "acme/", "acme/w/x"])
def test_a_bad_slug_is_refused_by_name(slug: str) -> None:
    with pytest.raises(ValueError, match=f"expected OWNER/REPO, got {slug!r}"):
        GitHubTarget.parse(slug)


def test_the_token_comes_from_the_first_variable_set() -> None:
    assert token_from_env({"GH_TOKEN": "c", "GITHUB_TOKEN": "b", "INFRARSI_GITHUB_TOKEN": ""}) == "b"
    assert token_from_env({"INFRARSI_GITHUB_TOKEN": "a", "GITHUB_TOKEN": "b"}) == "a"
    assert token_from_env({}) is None


def test_urls_of_github_com_and_of_an_enterprise_server() -> None:
    com = GitHubClient(GitHubTarget(owner="o", repo="r"), "t")
    assert com.repo_url == "https://api.github.com/repos/o/r" and com.graphql_url == "https://api.github.com/graphql"
    assert com.url("/pulls") == "https://api.github.com/repos/o/r/pulls" and com.url("https://x/y") == "https://x/y"
    assert com.session.headers["X-GitHub-Api-Version"] == "2022-11-28"
    ghe = GitHubClient(GitHubTarget(owner="o", repo="r", base_url="https://ghe.example.com"), "t")
    assert ghe.repo_url == "https://ghe.example.com/api/v3/repos/o/r"
    assert ghe.graphql_url == "https://ghe.example.com/api/graphql"


def test_a_refusal_carries_the_status_and_githubs_message(monkeypatch: pytest.MonkeyPatch) -> None:
    client = GitHubClient(GitHubTarget(owner="o", repo="r"), "t")
    answers = iter([_response(422, body={"message": "Validation Failed", "errors": [{"code": "custom"}]}),
                    _response(500, body=b"<html>oops</html>"),
                    _response(200, body={"errors": [{"message": "no queue"}, {"type": "X"}]}),
                    _response(200, body={"data": {"ok": 1}})])
    monkeypatch.setattr(client.session, "request", lambda *a, **kw: next(answers))
    with pytest.raises(GitHubAPIError) as e:
        client.call("POST", "/pulls")
    assert (e.value.status, str(e.value)) == (
        422, "GitHub POST https://api.github.com/repos/o/r/pulls: 422 Validation Failed ([{'code': 'custom'}])")
    with pytest.raises(GitHubAPIError, match="500 <html>oops</html>"):
        client.json("GET", "/x")
    with pytest.raises(GitHubAPIError, match="200 no queue; {'type': 'X'}"):
        client.graphql("query", {})
    assert client.graphql("query", {}) == {"ok": 1}


def test_the_session_retries_after_each_wait_within_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    answers = iter([_response(429, {"Retry-After": "2"}), _response(429, {"Retry-After": "3"}), _response(201)])
    monkeypatch.setattr(requests.Session, "request", lambda self, *a, **kw: next(answers))
    policy = RetryPolicy(sleep=slept.append)
    client = GitHubClient(GitHubTarget(owner="o", repo="r"), "t", policy=policy)
    assert client.session.request("GET", "https://api.github.com/x").status_code == 201
    assert slept == [2.0, 3.0] and policy.waits == [2.0, 3.0]
    # a wait beyond max_wait_s, or past max_retries, returns the limited answer itself
    answers = iter([_response(429, {"Retry-After": "7200"})])
    assert client.session.request("GET", "https://api.github.com/x").status_code == 429 and slept == [2.0, 3.0]
    policy.max_retries = 1
    answers = iter([_response(429, {"Retry-After": "1"}), _response(429, {"Retry-After": "1"})])
    assert client.session.request("GET", "https://api.github.com/x").status_code == 429 and slept == [2.0, 3.0, 1.0]


def test_transient_failures_are_retried_only_where_repeating_is_safe() -> None:
    slept: list[float] = []
    retry = RetryPolicy(transient_retries=3, backoff_s=0.5, sleep=slept.append).retry()
    for method in ("GET", "HEAD", "OPTIONS", "DELETE"):
        assert retry.is_retry(method, 502) and retry.is_retry(method, 503) and not retry.is_retry(method, 404)
    for method in ("POST", "PATCH", "PUT"):  # a dispatch, a comment or a merge must not happen twice
        assert not retry.is_retry(method, 502)
    assert not retry.is_retry("GET", 429)  # rate limits are the session's own waits (rate_limit_wait)
    assert (retry.total, retry.connect, retry.read, retry.status) == (3, 3, 3, 3)
    for _ in range(3):  # backoff through the policy's sleep: none before the first retry, then 0.5 x 2^n
        retry = retry.increment("GET", "/x", error=ProtocolError("Connection aborted."))  # dropped mid-answer
        retry.sleep()
    assert slept == [1.0, 2.0]


def test_a_failure_without_an_answer_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    client = GitHubClient(GitHubTarget(owner="o", repo="r"), "t")

    def refuse(*a: object, **kw: object) -> requests.Response:
        raise requests.ConnectionError(ConnectionRefusedError(111, "Connection refused"))

    monkeypatch.setattr(client.session, "request", refuse)
    with pytest.raises(GitHubUnavailable, match=r"no answer \(ConnectionRefusedError: .*tried 5 times; retry later"):
        client.json("GET", "/x")
    with pytest.raises(GitHubUnavailable) as caught:
        client.call("POST", "/dispatches")
    assert caught.value.exit_code == 3 and caught.value.status == 0 and "tried" not in str(caught.value)
