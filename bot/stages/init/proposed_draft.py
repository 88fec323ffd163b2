"""A contract drafted by a proposer (``infrarsi init --proposer anthropic``): the init stage's use of the
proposer seam, with the shell forms and the launcher read from the command as the static drafter does."""

from __future__ import annotations

import shlex

from bot.proposers import spent_text
from bot.stages.init.draft import ContractDraft, DraftError
from bot.stages.init.job import read_job
from bot.stages.init.launcher import LaunchError
from bot.stages.init.precision_draft import draft_precision
from infrarsi.seams.proposer import Proposer, RepoSummary

__all__ = ["draft_with"]


def draft_with(proposer: Proposer, command: str, summary: RepoSummary, *,
               tokens_per_step: int | None = None) -> ContractDraft:
    """A contract draft from ``proposer``, each rationale as the comment above its field.

    Raises :class:`bot.stages.init.draft.DraftError` when the proposer could not draft (its
    failures named), so ``init`` never writes a half-drafted contract.
    """
    job = None
    if proposer.name != "builtin":  # the builtin drafter reads the command itself (and offers the layout knobs)
        try:  # a model drafts the workload; the shell forms and the launcher are read here, as the builtin does
            job = read_job(command, summary.root)
        except LaunchError as e:
            raise DraftError(f"--command: {e}") from None
        command = shlex.join([*job.prog, *job.args])
    proposal = proposer.draft_contract(command, summary, tokens_per_step=tokens_per_step)
    if proposal.data is None:
        why = "; ".join(f.error for f in proposal.failures if f.error) or "no answer"
        raise DraftError(f"the {proposer.name} proposer could not draft a contract: {why}{spent_text(proposer)}")
    if proposer.name == "builtin":
        return ContractDraft(data=dict(proposal.data), notes=dict(proposal.rationale))
    model = proposer.model or proposer.name
    draft = ContractDraft(data=dict(proposal.data), notes={k: f"{model}: {v}" for k, v in proposal.rationale.items()})
    if job is not None and job.launch is not None:
        draft.data.pop("launch", None)
        job.launch.write(draft)
    if job is not None and job.workdir != ".":
        draft.set("workload.workdir", job.workdir, f"from the command: cd {job.workdir}; the job starts there")
    if job is not None and job.shell.env:
        draft.set("workload.env", dict(job.shell.env), "from the command: the environment it sets for the job")
    draft_precision(draft)  # the baseline's own precision only: allowing another is the user's call
    return draft
