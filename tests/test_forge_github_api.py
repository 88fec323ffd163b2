"""The shared GitHub REST client's pure parts: how long a rate-limited answer asks to wait, the repository slug,
the token's variables, URLs and GitHub's error messages. Requests against the stand-in: test_forge_github.py."""

from __future__ import annotations

import json

import pytest
import requests

from bot.forges.github_api import (GitHubAPIError, GitHubClient, GitHubTarget, RateLimitPolicy, rate_limit_wait,
                                   token_from_env)


def _response(status: int, headers: dict[str, str] | None = None, body: object = None) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r.headers.update(headers or {})
    r._content = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return r


POLICY = RateLimitPolicy(secondary_backoff_s=60.0, clock=lambda: 1000.0)


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
    policy = RateLimitPolicy(sleep=slept.append)
    client = GitHubClient(GitHubTarget(owner="o", repo="r"), "t", policy=policy)
    assert client.session.request("GET", "https://api.github.com/x").status_code == 201
    assert slept == [2.0, 3.0] and policy.waits == [2.0, 3.0]
    # a wait beyond max_wait_s, or past max_retries, returns the limited answer itself
    answers = iter([_response(429, {"Retry-After": "7200"})])
    assert client.session.request("GET", "https://api.github.com/x").status_code == 429 and slept == [2.0, 3.0]
    policy.max_retries = 1
    answers = iter([_response(429, {"Retry-After": "1"}), _response(429, {"Retry-After": "1"})])
    assert client.session.request("GET", "https://api.github.com/x").status_code == 429 and slept == [2.0, 3.0, 1.0]
