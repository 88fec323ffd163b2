"""A candidate as a git branch: worktree, patches, scope audit, commit, then the trial.

The promise to a reviewer: every candidate that ran is an ordinary commit on
``infrarsi/<run-id>/<trial-no>`` that touched only what the contract allows. A
candidate whose patch does not apply, or whose change leaves the editable scope,
is recorded as ``rejected`` with the offending path and symbol, and nothing is
launched; one whose change adds something a speed patch never needs is
quarantined for a person (``rejected``, ``quarantined for review: train.py:41:
os.dup2 (...)``; :mod:`bot.patching.suspicious`), and nothing is launched either.
Git is reached only through the :class:`~infrarsi.seams.workspace.Workspace`
the caller gives (the CLI opens it on the contract's repo).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from bot.workspace.data_links import link_data
from bot.workspace.errors import GitLayerError
from bot.patching.patch_set import apply_patches
from bot.patching.audit import AuditResult, audit_tree
from bot.patching.results import Applied, Failed, NotApplicable
from bot.patching.screen import Reader, commit_reader
from bot.patching.suspicious import quarantine_reason, scan_tree
from bot.stages.run.run_trial import TrialRequest, record_rejected, run_trial
from infrarsi.contract.lock import Lock
from infrarsi.contract.model import Contract
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.seams.executor import Executor
from infrarsi.seams.workspace import Workspace
from infrarsi.journal import Journal
from infrarsi.patches import PatchSpec
from infrarsi.trial_record import Candidate, TrialRecord


class UnknownPatchError(InfraRSIError, KeyError):
    """A candidate names a patch nobody proposed."""

    exit_code = BAD_INPUT


def audit_records(audit: AuditResult) -> tuple[dict[str, object], ...]:
    return tuple(asdict(change) for change in audit.changes)


def _patch_failures(results: tuple[Applied | NotApplicable | Failed, ...]) -> list[str]:
    out = []
    for r in results:
        if isinstance(r, NotApplicable):
            out.append(f"patch {r.patch_id} not applicable: {r.reason}")
        elif isinstance(r, Failed):
            out.append(f"patch {r.patch_id} failed: {r.error}")
    return out


def run_candidate(contract: Contract, lock: Lock, *, workspace: Workspace, base: str, run_id: str,
                  candidate: Candidate, patches: Mapping[str, PatchSpec], executor: Executor, journal: Journal,
                  memory_limit_bytes: int | None = None, timeout_s: float | None = None,
                  witness: bool = False, past_window: int = 0) -> TrialRecord:
    """Run one candidate in its own worktree of ``workspace`` at ``base`` (committed as the workspace's
    identity); always returns its record."""
    missing = [p for p in candidate.patches if p not in patches]
    if missing:
        raise UnknownPatchError(f"unknown patch(es): {', '.join(missing)} (known: {', '.join(sorted(patches))})")
    trial_no = journal.begin_trial(run_id, candidate)
    try:
        wt = workspace.create_worktree(base=base, run_id=run_id, trial_no=trial_no)
    except GitLayerError:
        journal.discard_pending(run_id, trial_no)  # nothing ran; the candidate is not to blame
        raise
    committed = False  # a rejected candidate leaves no branch: it would only point at the base
    try:
        request = TrialRequest(run_id=run_id, candidate=candidate, tree=wt.path,
                               memory_limit_bytes=memory_limit_bytes, timeout_s=timeout_s)
        results = apply_patches(wt.path, [patches[p] for p in candidate.patches])
        failures = _patch_failures(results)
        if failures:
            return record_rejected(contract, request, trial_no=trial_no, reason="; ".join(failures),
                                   journal=journal, executor_name=executor.name)
        before, after = workspace.changed_files(wt.path, wt.base_commit)
        audit = audit_tree(before, after, editable=contract.scope.editable, locked=contract.scope.locked,
                           allow_imports=contract.scope.allow_imports)
        records = audit_records(audit)
        findings = scan_tree(before, after, [c.path for c in audit.changes])
        if findings:  # never run: a person looks first (an audit entry of kind "quarantined" per line)
            return record_rejected(contract, request, trial_no=trial_no,
                                   reason=quarantine_reason(findings, audit.violations),
                                   journal=journal, executor_name=executor.name,
                                   audit=records + tuple(f.record() for f in findings))
        if not audit.ok:
            reason = "outside the editable scope: " + "; ".join(str(v) for v in audit.violations)
            return record_rejected(contract, request, trial_no=trial_no, reason=reason, journal=journal,
                                   executor_name=executor.name, audit=records)
        title = candidate.describe()
        commit = workspace.commit_trial(wt.path, message=f"infrarsi trial {run_id}/{trial_no}: {title}\n",
                                        trailers={"InfraRSI-Run": run_id, "InfraRSI-Trial": str(trial_no),
                                                  "InfraRSI-Candidate": candidate.digest()})
        committed = True
        link_data(contract.root, wt.path, contract.data.paths)  # after the commit: links are never committed
        request = TrialRequest(run_id=run_id, candidate=candidate, tree=wt.path, commit=commit,
                               memory_limit_bytes=memory_limit_bytes, timeout_s=timeout_s, witness=witness,
                               past_window=past_window)
        return run_trial(contract, lock, request, executor=executor, journal=journal, trial_no=trial_no,
                         audit=records, workspace=workspace)
    finally:
        workspace.remove_worktree(wt, keep_branch=committed)


@dataclass(frozen=True, kw_only=True)
class TrialContext:
    """Everything the stages share to run candidates of one repo: in worktrees when it is a git repo."""

    contract: Contract
    lock: Lock
    repo: Path
    executor: Executor
    journal: Journal
    patches: Mapping[str, PatchSpec]
    base: str | None = None  # the commit trials start from; None: not a git repo (working tree, no patches)
    workspace: Workspace | None = None  # the repo's git, the only way to it; required with a base
    memory_limit_bytes: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.base is not None and self.workspace is None:
            raise ValueError("a trial context with a base commit needs the repo's workspace")

    def base_reader(self) -> Reader | None:
        """The files of the base commit, read through the workspace (the working tree may differ from it); None
        outside git."""
        if self.workspace is None or self.base is None:
            return None
        return commit_reader(self.workspace, self.base)

    def run(self, run_id: str, candidate: Candidate, *, witness: bool = False, past_window: int = 0) -> TrialRecord:
        """Run ``candidate``; ``witness``: with the witness in its interpreter (see docs/trials.md);
        ``past_window``: step lines the job runs on after the measured ones before the bot stops it."""
        if self.workspace is not None and self.base is not None:
            return run_candidate(self.contract, self.lock, workspace=self.workspace, base=self.base, run_id=run_id,
                                 candidate=candidate, patches=self.patches, executor=self.executor,
                                 journal=self.journal, memory_limit_bytes=self.memory_limit_bytes,
                                 timeout_s=self.timeout_s, witness=witness, past_window=past_window)
        if candidate.patches:
            raise UnknownPatchError("code patches need a git repository (each candidate is a commit)")
        return run_trial(self.contract, self.lock,
                         TrialRequest(run_id=run_id, candidate=candidate, tree=self.repo,
                                      memory_limit_bytes=self.memory_limit_bytes, timeout_s=self.timeout_s,
                                      witness=witness, past_window=past_window),
                         executor=self.executor, journal=self.journal)


def trial_context(contract: Contract, lock: Lock, *, workspace: Workspace | None, executor: Executor,
                  journal: Journal, memory_limit_bytes: int | None = None,
                  timeout_s: float | None = None) -> TrialContext:
    """A context for the contract's repo; with its ``workspace`` (None: not a git repo), HEAD as the base and the
    applicable catalog."""
    from bot.patching.catalog import applicable_patches

    return TrialContext(contract=contract, lock=lock, repo=contract.root, executor=executor, journal=journal,
                        patches=applicable_patches(contract) if workspace is not None else {},
                        base=workspace.head_commit() if workspace is not None else None, workspace=workspace,
                        memory_limit_bytes=memory_limit_bytes, timeout_s=timeout_s)
