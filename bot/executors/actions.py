"""The GitHub Actions executor: trials on self-hosted GPU runners.

The bot side (:class:`ActionsExecutor`) pushes the trial branch, dispatches the
``infrarsi-trial`` workflow with the branch as ``ref`` and the candidate's
launch as an input, polls the run, downloads the artifact holding the
execution record and maps runner failures to what :func:`infrarsi.measure.classify`
reads. The runner side (``python -m bot.executors.actions``, run by the
workflow) launches the candidate through the local executor — scrubbed
environment, process group, timeout, memory limit, step events stamped by the
launcher — and writes that record. Dispatches are queued by the bot itself, at
most ``max_runners`` in flight, first come first served: Actions concurrency
groups cancel pending runs, so they cannot be the queue.

The launch and the record travel in the one codec every remote executor speaks
(:mod:`infrarsi.seams.executor_codec`): the runner launches, witnesses and checks
the lock exactly as a local trial does. Artifact format
(``infrarsi-trial-<dispatch_id>``, one zip): ``execution.json`` (the codec's
execution record) plus ``stdout.log`` and ``stderr.log`` when the job wrote them.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.workspace.commits import is_dirty, repo_head_commit
from bot.workspace.refs import head_branch, repository_dir
from bot.workspace.naming import parse_trial_branch
from bot.executors.witness import payload_sha256
from bot.forges.github_api import GitHubAPIError, GitHubClient, GitHubUnavailable
from infrarsi.contract.model import PYTHON_PLACEHOLDER, ActionsLaunch
from infrarsi.rundir import STDERR_LOG, STDOUT_LOG
from infrarsi.seams.executor import Executor, Execution, TrialSpec
from infrarsi.seams.executor_codec import execution_from_dict, execution_to_dict, spec_from_dict, spec_to_dict

RECORD_FILE = "execution.json"
ARTIFACT_PREFIX = "infrarsi-trial-"
TRIAL_WORKFLOW = "infrarsi-trial.yml"
_FAILED = {"failure", "cancelled", "timed_out", "startup_failure", "action_required", "stale", "skipped",
           "neutral"}


# -- the launch the workflow receives ---------------------------------------------------------------------
def spec_to_input(spec: TrialSpec, *, root: Path) -> str:
    """The candidate's launch as the workflow's ``candidate`` input: the one codec's form
    (:mod:`infrarsi.seams.executor_codec`), paths relative to the checkout, the interpreter the runner's own."""
    cwd = Path(spec.cwd).resolve()
    try:
        rel = cwd.relative_to(root.resolve())
    except ValueError:
        raise ValueError(f"trial directory {cwd} is outside the repository {root}") from None
    argv = list(spec.argv)
    if argv and argv[0] == sys.executable:
        argv[0] = PYTHON_PLACEHOLDER  # the runner's own interpreter
    portable = replace(spec, argv=tuple(argv), cwd=rel.as_posix(), root=".", log_dir=None)
    return json.dumps(spec_to_dict(portable), sort_keys=True, separators=(",", ":"))


def spec_from_input(text: str, *, checkout: Path, log_dir: Path | None = None) -> TrialSpec:
    spec = spec_from_dict(json.loads(text))
    argv = [sys.executable if a == PYTHON_PLACEHOLDER and i == 0 else a for i, a in enumerate(spec.argv)]
    return replace(spec, argv=tuple(argv), cwd=str(checkout / spec.cwd), root=str(checkout),
                   log_dir=str(log_dir) if log_dir else None)


def trial_ref(cwd: str) -> tuple[Path, str]:
    """The repository root and the branch checked out at ``cwd`` (the trial's worktree)."""
    branch = head_branch(cwd)
    if branch is None:
        raise ValueError(f"{cwd}: the Actions executor runs a branch; HEAD is detached or unborn")
    return repository_dir(cwd), branch


# -- the queue --------------------------------------------------------------------------------------------
class FifoSlots:
    """At most ``n`` holders; waiters are served in arrival order."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("max_runners must be at least 1")
        self.n = n
        self._cond = threading.Condition()
        self._busy = 0
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> FifoSlots:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._cond.wait_for(lambda: ticket == self._serving and self._busy < self.n)
            self._busy += 1
            self._serving += 1
            self._cond.notify_all()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionsSettings:
    workflow: str = TRIAL_WORKFLOW
    max_runners: int = 1  # dispatches in flight at once (how many GPU runners the bot may occupy)
    poll_interval_s: float = 15.0
    queue_timeout_s: float = 6 * 3600.0  # a run no runner picked up by then is cancelled
    setup_allowance_s: float = 900.0  # checkout and install, on top of the trial's own timeout
    devices: int = 1  # devices one runner holds: cost = run duration x devices


class ActionsExecutor(Executor):
    """An :class:`infrarsi.seams.executor.Executor` whose trials run on self-hosted GitHub Actions runners.

    ``push(repo_root, branch)`` makes the trial branch exist on GitHub (the
    GitHub forge's push, forced: trial branches belong to the bot).
    """

    name = "actions"

    def __init__(self, client: GitHubClient, *, push: Callable[[Path, str], object] | None = None,
                 settings: ActionsSettings | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, on_step: Callable[[int], None] | None = None,
                 stop: threading.Event | None = None) -> None:
        self.client = client
        self.push = push
        self.settings = settings or ActionsSettings()
        self.sleep, self.clock = sleep, clock
        self.on_step = on_step  # called once, with the steps the runner saw, when the record is back
        self._stop = stop or threading.Event()
        self._slots = FifoSlots(self.settings.max_runners)
        self._push_lock = threading.Lock()

    def interrupt(self) -> None:
        """Cancel the runs in flight and return from ``execute`` (from another thread or a signal handler)."""
        self._stop.set()

    def execute(self, spec: TrialSpec) -> Execution:
        execution = self._execute(spec)
        if self.on_step is not None and execution.events:
            self.on_step(len(execution.events))
        return execution

    def _execute(self, spec: TrialSpec) -> Execution:
        if self._stop.is_set():  # an interrupted bot dispatches nothing more
            return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0, killed_for="interrupt",
                             stderr_tail="not dispatched: the bot was interrupted")
        try:
            root, branch = trial_ref(spec.cwd)
            candidate = spec_to_input(spec, root=root)
            self._publish(root, branch)
        except Exception as e:  # noqa: BLE001  (the trial fails on the record, the run goes on)
            return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0,
                             stderr_tail=f"could not start the trial on GitHub Actions: {e}")
        dispatch_id = uuid.uuid4().hex[:16]
        with self._slots:
            try:
                run = self._dispatch(branch, candidate, dispatch_id)
            except GitHubAPIError as e:
                return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0,
                                 stderr_tail=f"GitHub Actions: could not dispatch the trial: {e}")
            try:
                run = self._wait(run, spec)
            except GitHubAPIError as e:  # the client's retries are spent: GitHub is down or unreachable
                return self._abandon(run, e)
        try:
            return self._result(run, dispatch_id, spec)
        except GitHubAPIError as e:
            return Execution(events=(), returncode=None, wall_s=_duration(run), peak_rss_bytes=0,
                             devices=self.settings.devices, stderr_tail=(
                                 f"workflow run {run['id']} ({run.get('html_url', '')}) ended, but its trial record "
                                 f"could not be read back: {e}"))

    def _abandon(self, run: dict[str, Any], error: GitHubAPIError) -> Execution:
        """Polling failed for good: cancel the run on GitHub (it must not go on holding a GPU runner for a trial
        the bot no longer waits for) and record the trial as crashed, with both reasons."""
        where = f"workflow run {run['id']} ({run.get('html_url', '')})"
        try:
            self.client.call("POST", f"/actions/runs/{run['id']}/cancel", ok=(202, 409))
            cancelled = "cancelled it on GitHub"
        except GitHubAPIError as e:
            cancelled = f"cancelling it failed too ({e}): cancel it by hand"
        return Execution(events=(), returncode=None, wall_s=_duration(run), peak_rss_bytes=0,
                         devices=self.settings.devices, stderr_tail=f"polling {where} failed: {error}; {cancelled}",
                         info=(("actions_run_id", run["id"]), ("actions_run_url", run.get("html_url", "")),
                               ("actions_conclusion", "abandoned")))

    def _publish(self, root: Path, branch: str) -> None:
        """Make the runner's checkout of ``branch`` the tree the bot means: committed, and on GitHub.

        Only the bot's own trial branches are pushed (forced); any other branch (the user's base, say)
        is never pushed, it must already be on GitHub at the local commit.
        """
        if is_dirty(root):
            raise ValueError(f"{root} has uncommitted changes; the runner checks out {branch} as committed")
        if parse_trial_branch(branch) is not None:
            if self.push is not None:
                with self._push_lock:  # one push at a time: two trials of one branch must not race on its ref
                    self.push(root, branch)
            return
        local = repo_head_commit(root)
        try:
            remote = self.client.json("GET", f"/git/ref/heads/{branch}")["object"]["sha"]
        except GitHubUnavailable:
            raise
        except GitHubAPIError:
            remote = None
        if remote != local:
            raise ValueError(f"{branch} is at {local[:12]} here and at {(remote or 'nothing')[:12]} on GitHub; "
                             "the Actions executor pushes only trial branches (infrarsi/<run>/<n>)")

    # -- dispatch and poll ----------------------------------------------------------------------------
    def _dispatch(self, branch: str, candidate: str, dispatch_id: str) -> dict[str, Any]:
        workflow = self.settings.workflow
        body = {"ref": branch, "inputs": {"trial_branch": branch, "candidate": candidate, "dispatch_id": dispatch_id},
                "return_run_details": True}
        response = self.client.call("POST", f"/actions/workflows/{workflow}/dispatches", json=body)
        if response.status_code == 200 and response.content:
            run_id = response.json().get("workflow_run_id")
            if run_id:
                try:
                    return self.client.json("GET", f"/actions/runs/{run_id}")
                except GitHubUnavailable:  # dispatched all the same: the polls read it (or give up and cancel it)
                    return {"id": run_id, "status": "queued"}
        # GitHub Enterprise Server without run details: find the run by its run-name, which carries the id
        deadline = self.clock() + 120.0
        while True:
            runs = self.client.json("GET", f"/actions/workflows/{workflow}/runs",
                                    params={"branch": branch, "event": "workflow_dispatch", "per_page": 20})
            for run in runs.get("workflow_runs", []):
                if dispatch_id in (run.get("display_title") or run.get("name") or ""):
                    return run
            if self.clock() > deadline:
                raise GitHubAPIError("GET", workflow, 404, f"no run of {workflow} for dispatch {dispatch_id}")
            self.sleep(min(self.settings.poll_interval_s, 5.0))

    def _wait(self, run: dict[str, Any], spec: TrialSpec) -> dict[str, Any]:
        s = self.settings
        queued_deadline = self.clock() + s.queue_timeout_s
        running_deadline: float | None = None
        while run.get("status") != "completed":
            if self._stop.is_set():
                self.client.call("POST", f"/actions/runs/{run['id']}/cancel", ok=(202, 409))
                return {**run, "status": "completed", "conclusion": "cancelled",
                        "infrarsi_reason": "the bot was interrupted"}
            now = self.clock()
            if run.get("status") == "in_progress" and running_deadline is None:
                running_deadline = now + spec.timeout_s + s.setup_allowance_s
            late = running_deadline is not None and now > running_deadline
            if late or (running_deadline is None and now > queued_deadline):
                self.client.call("POST", f"/actions/runs/{run['id']}/cancel", ok=(202, 409))
                return {**run, "status": "completed", "conclusion": "timed_out",
                        "infrarsi_reason": "no runner picked it up" if running_deadline is None else
                        "the bot stopped waiting for it"}
            self.sleep(s.poll_interval_s)
            run = self.client.json("GET", f"/actions/runs/{run['id']}")
        return run

    # -- read back --------------------------------------------------------------------------------------
    def _result(self, run: dict[str, Any], dispatch_id: str, spec: TrialSpec) -> Execution:
        duration = _duration(run)
        conclusion = run.get("conclusion") or "unknown"
        where = f"workflow run {run['id']} ({run.get('html_url', '')})"
        info = (("actions_run_id", run["id"]), ("actions_run_url", run.get("html_url", "")),
                ("actions_conclusion", conclusion), ("actions_run_s", duration))
        recorded = self._download(run, dispatch_id, spec) if run.get("infrarsi_reason") is None else None
        if recorded is not None and conclusion != "timed_out":
            ex = same_witness(recorded)
            return replace(ex, wall_s=max(ex.wall_s, duration), devices=max(ex.devices, self.settings.devices),
                           info=ex.info + info + (("runner_wall_s", ex.wall_s),))
        devices = self.settings.devices
        if run.get("infrarsi_reason") == "the bot was interrupted":
            return Execution(events=(), returncode=None, wall_s=duration, peak_rss_bytes=0, killed_for="interrupt",
                             stderr_tail=f"{where} cancelled: the bot was interrupted", devices=devices, info=info)
        if conclusion == "timed_out":
            why = run.get("infrarsi_reason") or "it ran past the workflow's timeout-minutes"
            return Execution(events=recorded.events if recorded else (), returncode=None, wall_s=duration,
                             peak_rss_bytes=recorded.peak_rss_bytes if recorded else 0, killed_for="timeout",
                             stderr_tail=f"{where} timed out: {why}", devices=devices, info=info)
        what = "succeeded but uploaded no trial record" if conclusion == "success" else f"concluded {conclusion}"
        return Execution(events=(), returncode=None, wall_s=duration, peak_rss_bytes=0, devices=devices,
                         stderr_tail=f"{where} {what} before a trial record was uploaded", info=info)

    def _download(self, run: dict[str, Any], dispatch_id: str, spec: TrialSpec) -> Execution | None:
        listing = self.client.pages(f"/actions/runs/{run['id']}/artifacts", key="artifacts")
        wanted = ARTIFACT_PREFIX + dispatch_id
        arts = [a for a in listing if a["name"] == wanted and not a.get("expired")]
        if not arts:
            return None
        blob = self.client.download(arts[0]["archive_download_url"])
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            names = set(z.namelist())
            if RECORD_FILE not in names:
                return None
            record = execution_from_dict(json.loads(z.read(RECORD_FILE)))
            if spec.log_dir:
                log_dir = Path(spec.log_dir)
                log_dir.mkdir(parents=True, exist_ok=True)
                for log in (STDOUT_LOG, STDERR_LOG):
                    if log in names:
                        (log_dir / log).write_bytes(z.read(log))
        return record


def same_witness(execution: Execution) -> Execution:
    """The runner authenticated its witness's report against the witness it ran; the bot also holds that witness
    to its own: a runner with another InfraRSI installed ran other checks, so they are not counted (not
    checked, and the trial not blamed for it)."""
    reports = [r for r in (execution.witness, *execution.witness_ranks) if r is not None]
    ours = payload_sha256()
    theirs = next((str(r.get("source_sha256")) for r in reports if r.get("source_sha256") != ours), None)
    if theirs is None:
        return execution
    return replace(execution, witness=None, witness_ranks=(), witness_skipped=(
        f"the runner's witness (sha256 {theirs[:12]}) is not this bot's ({ours[:12]}): install the bot's "
        "InfraRSI version on the runners (vars.INFRARSI_VERSION)"))


RUNNERS_ENV = "INFRARSI_ACTIONS_RUNNERS"
WORKFLOW_ENV = "INFRARSI_ACTIONS_WORKFLOW"
DEVICES_ENV = "INFRARSI_ACTIONS_DEVICES"


def settings_for(launch: ActionsLaunch, environ: Mapping[str, str]) -> ActionsSettings:
    """The contract's ``[launch.actions]``, each of ``INFRARSI_ACTIONS_RUNNERS``, ``_WORKFLOW``, ``_DEVICES``
    overriding its key when set (a CI variable sizes the fan-out without editing the locked contract)."""
    def count(name: str, default: int) -> int:
        text = environ.get(name)
        if not text:
            return default
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {text!r}")
        return value

    return ActionsSettings(workflow=environ.get(WORKFLOW_ENV) or launch.workflow,
                           max_runners=count(RUNNERS_ENV, launch.runners), devices=count(DEVICES_ENV, launch.devices),
                           poll_interval_s=launch.poll_interval_s)


def executor_for_repo(repo: Path, launch: ActionsLaunch | None = None, *, environ: Mapping[str, str] | None = None,
                      on_step: Callable[[int], None] | None = None,
                      stop: threading.Event | None = None) -> ActionsExecutor:
    """The executor the registry builds: the GitHub repository behind ``launch.remote`` (as ``--forge github``
    finds it, token from the environment), trial branches pushed through that forge."""
    import os

    from bot.forges.github import forge_for_repo

    launch = launch or ActionsLaunch()
    env = dict(os.environ if environ is None else environ)
    settings = settings_for(launch, env)
    forge = forge_for_repo(repo, launch.remote, environ=env)
    return ActionsExecutor(forge.client, push=lambda root, branch: forge.push(root, branch, force=True),
                           settings=settings, on_step=on_step, stop=stop)


def _duration(run: dict[str, Any]) -> float:
    """Device-seconds the runner was held: ``run_started_at`` to ``updated_at``."""
    try:
        start = datetime.fromisoformat(run["run_started_at"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(run["updated_at"].replace("Z", "+00:00"))
    except (KeyError, AttributeError, ValueError):
        return 0.0
    return max(0.0, (end - start).total_seconds())


# -- the runner side --------------------------------------------------------------------------------------
def run_on_runner(candidate: str, *, checkout: Path, out: Path) -> Execution:
    """Launch the candidate in ``checkout`` with the local executor and write the record into ``out``.

    The checkout must be the commit the bot ran the trial at (a branch can move between push and checkout);
    the local executor then checks the lock there, runs the witness and stamps the steps, as on the bot's
    own machine."""
    from bot.executors.local import LocalExecutor

    out.mkdir(parents=True, exist_ok=True)
    spec = spec_from_input(candidate, checkout=checkout, log_dir=out)
    try:
        head = repo_head_commit(checkout)
    except Exception as e:  # noqa: BLE001 - a checkout that is not a git repository: said in the record
        head = f"unknown ({e})"
    if spec.commit is not None and head != spec.commit:
        execution = Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0,
                              stderr_tail=f"not started: the runner checked out {head[:12]}, not the trial's "
                                          f"commit {spec.commit[:12]} (the trial branch moved after the push)")
    else:
        execution = LocalExecutor().execute(spec)
    (out / RECORD_FILE).write_text(json.dumps(execution_to_dict(execution), sort_keys=True) + "\n")
    return execution


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.executors.actions",
                                     description="run one InfraRSI trial on this runner and write its record")
    parser.add_argument("--candidate", required=True, help="the workflow's candidate input (JSON)")
    parser.add_argument("--checkout", default=".", help="the checked-out trial branch")
    parser.add_argument("--out", required=True, help="directory to upload as the trial artifact")
    args = parser.parse_args(argv)
    execution = run_on_runner(args.candidate, checkout=Path(args.checkout).resolve(), out=Path(args.out))
    print(json.dumps({"returncode": execution.returncode, "killed_for": execution.killed_for,
                      "steps": len(execution.events), "wall_s": round(execution.wall_s, 3)}))
    return 0  # the trial's own failure is data in the record, not a failed job


if __name__ == "__main__":
    raise SystemExit(main())
