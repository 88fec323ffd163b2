"""The one GitHub client the forge and the Actions executor share: github3.py's session carries every call.

github3.py carries the objects (pull requests, issues, reviews); its session
(:class:`GitHubAPISession`) carries everything else it lacks (draft pull
requests, merges that return the merge commit, ``workflow_dispatch``, runs and
artifacts, GraphQL), so every request, REST or GraphQL, gets the same three
things:

- **transient failures retried where that is safe**: urllib3's ``Retry`` on the
  session's adapters retries idempotent requests (GET, HEAD, OPTIONS, DELETE)
  after a 5xx or a dropped connection, with exponential backoff; a request that
  never reached GitHub (refused or timed-out connect) is retried whatever its
  method; a POST, PATCH or PUT that may have reached GitHub is never repeated
  blindly (a dispatch or a merge must not happen twice). What still fails is
  :class:`GitHubUnavailable` (exit status 3: retry later), never a bad-input 2;
- **GitHub's rate limits**: a 403 or 429 with ``Retry-After`` waits that long,
  one with ``x-ratelimit-remaining: 0`` waits until ``x-ratelimit-reset``, and
  a secondary limit without either header backs off exponentially;
- **pagination** through one helper (:meth:`GitHubClient.pages`), which follows
  the ``Link: rel="next"`` header GitHub documents.

Sleep and clock are injectable so tests assert on the wait instead of sitting through it.
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
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from infrarsi.errors import BAD_INPUT, TRANSIENT, InfraRSIError

TOKEN_ENV = ("INFRARSI_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
BASE_URL_ENV = "INFRARSI_GITHUB_URL"
#: Methods whose repetition changes nothing on GitHub: retried after a 5xx or a connection lost mid-answer.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
#: Server errors worth a retry (GitHub's 500, 502 Bad Gateway, 503 and 504 under load).
RETRY_STATUSES = frozenset({500, 502, 503, 504})


class GitHubAPIError(InfraRSIError):
    """A request GitHub refused; carries the status and GitHub's message."""

    exit_code = BAD_INPUT

    def __init__(self, method: str, url: str, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"GitHub {method} {url}: {status} {message}" if status else
                         f"GitHub {method} {url}: {message}")


class GitHubUnavailable(GitHubAPIError):
    """GitHub answered 5xx, or not at all, after the retries that were safe: it may pass on retry.
    ``status`` is 0 when no answer came (the connection was refused or dropped)."""

    exit_code = TRANSIENT


@dataclass(kw_only=True, slots=True)
class RetryPolicy:
    """How long the client is willing to wait: for GitHub's rate limits, and between retries of a transient
    failure (urllib3's ``Retry``: no wait before the first retry, then ``backoff_s`` x 2, x 4, ...)."""

    max_retries: int = 6  # rate-limited answers
    max_wait_s: float = 3600.0  # a rate-limit wait longer than this fails the request instead
    secondary_backoff_s: float = 60.0  # GitHub's advice for a secondary limit without headers
    transient_retries: int = 4  # 5xx and dropped connections, per request
    backoff_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    waits: list[float] = field(default_factory=list)  # every rate-limit wait taken, for the caller's log

    def retry(self) -> Retry:
        """urllib3's ``Retry`` for the session's adapters: 5xx and lost connections of idempotent requests;
        connects that never reached GitHub for every method; rate limits are left to :func:`rate_limit_wait`."""
        n = self.transient_retries
        retry = _Retry(total=n, connect=n, read=n, status=n, other=0, redirect=False, allowed_methods=IDEMPOTENT,
                       status_forcelist=RETRY_STATUSES, backoff_factor=self.backoff_s, raise_on_status=False,
                       raise_on_redirect=False, respect_retry_after_header=False)
        retry.sleeper = self.sleep
        return retry


class _Retry(Retry):
    """urllib3's ``Retry``, sleeping its backoff through the policy's (injectable) ``sleep``."""

    sleeper: Callable[[float], None] = time.sleep

    def new(self, **kw: Any) -> _Retry:
        retry = super().new(**kw)
        retry.sleeper = self.sleeper
        return retry

    def sleep(self, response: Any = None) -> None:
        backoff = self.get_backoff_time()
        if backoff > 0:
            self.sleeper(backoff)


def rate_limit_wait(response: requests.Response, *, attempt: int, policy: RetryPolicy) -> float | None:
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


class GitHubAPISession(GitHubSession):
    """github3.py's session with urllib3's ``Retry`` on its adapters, retrying rate-limited requests after the
    wait GitHub asks for."""

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        super().__init__()
        self.policy = policy or RetryPolicy()
        adapter = HTTPAdapter(max_retries=self.policy.retry())
        self.mount("https://", adapter)
        self.mount("http://", adapter)

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


class _Anonymous(requests.auth.AuthBase):
    """No credentials: a redirect to artifact storage must not carry the token."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers.pop("Authorization", None)
        return request


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

    def __init__(self, target: GitHubTarget, token: str, *, policy: RetryPolicy | None = None) -> None:
        self.target = target
        self.token = token
        self.session = GitHubAPISession(policy)
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
        """One raw request; any status outside ``ok`` raises :class:`GitHubAPIError` with GitHub's message
        (:class:`GitHubUnavailable` for a 5xx or no answer, once the safe retries are spent)."""
        url = self.url(path)
        response = self._send(method, url, json=json, params=params)
        if response.status_code not in ok:
            raise _refusal(method, url, response)
        return response

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        try:
            return self.session.request(method, url, **kwargs)
        except requests.RequestException as e:
            raise GitHubUnavailable(method, url, 0, f"no answer ({_reason(e)}){self._retried(method)}; "
                                    "retry later") from e

    def _retried(self, method: str) -> str:
        n = self.session.policy.transient_retries
        return f", tried {n + 1} times" if method.upper() in IDEMPOTENT and n else ""

    def pages(self, path: str, *, params: dict[str, Any] | None = None, key: str | None = None) -> list[Any]:
        """Every item of a paginated list (``per_page=100``), following GitHub's ``Link: rel="next"``; ``key``
        names the list in an object answer (``artifacts``, ``workflow_runs``, ``check_runs``)."""
        out: list[Any] = []
        url: str | None = self.url(path)
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        while url:
            response = self.call("GET", url, params=query)
            data = response.json() if response.content else None
            items = (data or {}).get(key) if key else data
            out += items or []
            url, query = (response.links.get("next") or {}).get("url"), None  # the next link carries the query
        return out

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
        response = self._send("GET", self.url(url), allow_redirects=False)
        if response.status_code in (301, 302, 303, 307, 308):
            response = self._send("GET", response.headers["Location"], auth=_Anonymous(), timeout=60)
        if response.status_code != 200:
            raise _refusal("GET", url, response)
        return response.content


def _refusal(method: str, url: str, response: requests.Response) -> GitHubAPIError:
    """The error for a status outside the expected ones: a 5xx (its safe retries spent) may pass on retry."""
    status = response.status_code
    if status in RETRY_STATUSES:
        return GitHubUnavailable(method, url, status, f"{_message(response)}; retry later")
    return GitHubAPIError(method, url, status, _message(response))


def _reason(e: requests.RequestException) -> str:
    """The innermost cause of a failed request, in a few words (``RemoteDisconnected: ...``)."""
    inner: BaseException = e
    for _ in range(8):  # requests' ConnectionError -> urllib3's MaxRetryError -> its reason -> the socket's
        reason = getattr(inner, "reason", None)
        nxt = reason if isinstance(reason, BaseException) else (inner.args[0] if inner.args and isinstance(
            inner.args[0], BaseException) else inner.__cause__ or inner.__context__)
        if nxt is None or nxt is inner:
            break
        inner = nxt
    return f"{type(inner).__name__}: {str(inner)[:200]}"


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
