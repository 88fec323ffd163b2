"""The GitHub REST client the forge and the Actions executor share.

github3.py carries the objects (pull requests, issues, reviews, statuses); its
session carries everything else it lacks (draft pull requests, merges that
return the merge commit, ``workflow_dispatch``, runs and artifacts). Both go
through :class:`RateLimitedSession`, so every request honours GitHub's rate
limits: a 403 or 429 with ``Retry-After`` waits that long, one with
``x-ratelimit-remaining: 0`` waits until ``x-ratelimit-reset``, and a secondary
limit without either header backs off exponentially. Sleep and clock are
injectable so tests assert on the wait instead of sitting through it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import github3
import requests
from github3.session import GitHubSession

from infrarsi.errors import BAD_INPUT, InfraRSIError
TOKEN_ENV = ("INFRARSI_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
BASE_URL_ENV = "INFRARSI_GITHUB_URL"


class GitHubAPIError(InfraRSIError):
    """A request GitHub refused; carries the status and GitHub's message."""

    exit_code = BAD_INPUT

    def __init__(self, method: str, url: str, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"GitHub {method} {url}: {status} {message}")


@dataclass(kw_only=True, slots=True)
class RateLimitPolicy:
    """How long the client is willing to wait for GitHub's limits."""

    max_retries: int = 6
    max_wait_s: float = 3600.0  # a wait longer than this fails the request instead
    secondary_backoff_s: float = 60.0  # GitHub's advice for a secondary limit without headers
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    waits: list[float] = field(default_factory=list)  # every wait taken, for the caller's log


def rate_limit_wait(response: requests.Response, *, attempt: int, policy: RateLimitPolicy) -> float | None:
    """Seconds to wait before retrying ``response``, or None if it is not a rate-limit answer."""
    if response.status_code not in (403, 429):
        return None
    headers = response.headers
    retry_after = headers.get("Retry-After")
    if retry_after is not None:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            return policy.secondary_backoff_s
    if headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset"):
        try:
            return max(0.0, float(headers["x-ratelimit-reset"]) - policy.clock()) + 1.0
        except ValueError:
            return policy.secondary_backoff_s
    text = response.text.lower() if response.content else ""
    if "secondary rate limit" in text or "abuse" in text or response.status_code == 429:
        return policy.secondary_backoff_s * (2 ** attempt)
    return None  # a plain 403: permissions, not a limit


class RateLimitedSession(GitHubSession):
    """github3.py's session, retrying rate-limited requests after the wait GitHub asks for."""

    def __init__(self, policy: RateLimitPolicy | None = None) -> None:
        super().__init__()
        self.policy = policy or RateLimitPolicy()

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        attempt = 0
        while True:
            response = super().request(*args, **kwargs)
            wait = rate_limit_wait(response, attempt=attempt, policy=self.policy)
            if wait is None or attempt >= self.policy.max_retries or wait > self.policy.max_wait_s:
                return response
            self.policy.waits.append(wait)
            self.policy.sleep(wait)
            attempt += 1


@dataclass(frozen=True, kw_only=True, slots=True)
class GitHubTarget:
    """Which repository on which GitHub: github.com when ``base_url`` is None, else Enterprise Server."""

    owner: str
    repo: str
    base_url: str | None = None  # e.g. https://github.example.com (the web root; /api/v3 is added)

    @staticmethod
    def parse(slug: str, base_url: str | None = None) -> GitHubTarget:
        owner, sep, repo = slug.strip().removesuffix(".git").partition("/")
        if not sep or not owner or not repo or "/" in repo:
            raise ValueError(f"expected OWNER/REPO, got {slug!r}")
        return GitHubTarget(owner=owner, repo=repo, base_url=(base_url or None))


def token_from_env(environ: dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    for name in TOKEN_ENV:
        if env.get(name):
            return env[name]
    return None


class GitHubClient:
    """One authenticated connection: the github3 object, its raw session and the repository's API root."""

    def __init__(self, target: GitHubTarget, token: str, *, policy: RateLimitPolicy | None = None) -> None:
        self.target = target
        self.token = token
        self.session = RateLimitedSession(policy)
        if target.base_url:
            self.gh: github3.GitHub = github3.GitHubEnterprise(target.base_url, token=token, session=self.session)
        else:
            self.gh = github3.GitHub(token=token, session=self.session)
        self.api_root = str(self.session.base_url).rstrip("/")
        self.repo_url = f"{self.api_root}/repos/{target.owner}/{target.repo}"
        self.session.headers["X-GitHub-Api-Version"] = "2022-11-28"

    def url(self, path: str) -> str:
        """An API URL under the repository (``path`` starts with '/') or absolute if it already is one."""
        return path if path.startswith("http") else self.repo_url + path

    def call(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
             ok: tuple[int, ...] = (200, 201, 204)) -> requests.Response:
        """One raw request; any status outside ``ok`` raises :class:`GitHubAPIError` with GitHub's message."""
        url = self.url(path)
        response = self.session.request(method, url, json=json, params=params)
        if response.status_code not in ok:
            raise GitHubAPIError(method, url, response.status_code, _message(response))
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        return response.json() if response.content else None

    @property
    def graphql_url(self) -> str:
        """GitHub's GraphQL endpoint: ``https://api.github.com/graphql``, or ``<host>/api/graphql`` on Enterprise."""
        return self.api_root.removesuffix("/v3") + "/graphql"

    def graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """The ``data`` of one GraphQL request; GitHub answers refusals with 200 and ``errors``, raised here as
        :class:`GitHubAPIError` carrying every error's message."""
        response = self.call("POST", self.graphql_url, json={"query": query, "variables": variables})
        body = response.json() if response.content else {}
        if body.get("errors"):
            messages = "; ".join(str(e.get("message") or e) for e in body["errors"])
            raise GitHubAPIError("POST", self.graphql_url, response.status_code, messages)
        return body.get("data") or {}

    def download(self, url: str) -> bytes:
        """A binary download (artifact zip): GitHub redirects to storage that must not get our token."""
        response = self.session.request("GET", self.url(url), allow_redirects=False)
        if response.status_code in (301, 302, 303, 307, 308):
            response = requests.get(response.headers["Location"], timeout=60)
        if response.status_code != 200:
            raise GitHubAPIError("GET", url, response.status_code, _message(response))
        return response.content


def _message(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict):
        errors = data.get("errors")
        detail = f" ({errors})" if errors else ""
        return f"{data.get('message', '')}{detail}"
    return str(data)[:300]
