"""Proposers: the built-in one (offline, the default) and the anthropic one (``--proposer anthropic``).

Both implement :class:`infrarsi.seams.proposer.Proposer`; ``make_proposer`` is the one
place that turns a name and its settings into an instance.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from bot.proposers.llm import LLMConfig
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.rundir import llm_cache_dir
from infrarsi.seams.proposer import Proposer

PROPOSERS = ("builtin", "anthropic")


class ProposerSetupError(InfraRSIError, ValueError):
    """The proposer cannot be built (no API key for the anthropic proposer, an unknown name)."""

    exit_code = BAD_INPUT


def make_proposer(name: str, *, config: LLMConfig | None = None, cache_dir: Path | None = None,
                  api_key: str | None = None) -> Proposer:
    if name == "builtin":
        from bot.proposers.builtin import BuiltinProposer

        return BuiltinProposer()
    if name == "anthropic":
        import os

        from bot.proposers.anthropic import AnthropicProposer

        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ProposerSetupError("--proposer anthropic needs ANTHROPIC_API_KEY in the environment")
        return AnthropicProposer(config=config or LLMConfig(), api_key=key, cache_dir=cache_dir)
    raise ProposerSetupError(f"unknown proposer {name!r} (known: {', '.join(PROPOSERS)})")


__all__ = ["PROPOSERS", "BuiltinProposer", "LLMConfig", "ProposerSetupError", "make_proposer"]


def __getattr__(name: str) -> object:
    # The built-in proposer pulls in the search engine and the init stage; the CLI parser imports this
    # package for its arguments only, so the heavy import waits for the first use.
    if name == "BuiltinProposer":
        from bot.proposers.builtin import BuiltinProposer

        return BuiltinProposer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def add_proposer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--proposer`` and the anthropic proposer's settings, shared by ``init`` and ``run``."""
    parser.add_argument("--proposer", choices=PROPOSERS, default="builtin",
                        help="who drafts, states priors and proposes patches (default builtin: offline; anthropic "
                        "needs ANTHROPIC_API_KEY)")
    parser.add_argument("--llm-model", default=None,
                        help=f"anthropic proposer: the model (default {_default_model()})")
    parser.add_argument("--llm-base-url", default=None, help="anthropic proposer: API base URL")
    parser.add_argument("--llm-token-budget", type=int, default=None,
                        help="anthropic proposer: input+output tokens per run (default 200000; 0: unlimited)")
    parser.add_argument("--llm-cache", default=None, metavar="DIR",
                        help=f"anthropic proposer: response cache (default <repo>/{llm_cache_dir(Path())})")


def _default_model() -> str:
    from bot.proposers.llm import DEFAULT_MODEL

    return DEFAULT_MODEL


def proposer_from_args(args: argparse.Namespace, root: Path) -> Proposer:
    """The proposer the command line asks for; the cache defaults to the repo's state directory."""
    from dataclasses import replace

    config = LLMConfig()
    if args.llm_model:
        config = replace(config, model=args.llm_model)
    if args.llm_base_url:
        config = replace(config, base_url=args.llm_base_url)
    if args.llm_token_budget is not None:
        config = replace(config, token_budget=args.llm_token_budget or None)
    cache = Path(args.llm_cache) if args.llm_cache else llm_cache_dir(root)
    return make_proposer(args.proposer, config=config, cache_dir=cache)


def draft_with(proposer: Proposer, command: str, summary: "RepoSummary", *,
               tokens_per_step: int | None = None) -> "ContractDraft":
    """A contract draft from ``proposer``, each rationale as the comment above its field.

    Raises :class:`bot.stages.init.draft.DraftError` when the proposer could not draft (its
    failures named), so ``init`` never writes a half-drafted contract.
    """
    import shlex

    from bot.stages.init.draft import ContractDraft, DraftError
    from bot.stages.init.job import read_job
    from bot.stages.init.launcher import LaunchError

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
    return draft


def spent_text(proposer: Proposer) -> str:
    """`` (spent N tokens, $X in K request(s))`` when the proposer spent anything: every command that spent
    tokens says so, also when it fails."""
    usage = proposer.usage()
    if not usage.tokens and not usage.calls:
        return ""
    return (f" (spent {usage.tokens} tokens, ${usage.cost_usd:.4f} in {usage.calls} request(s)"
            + (f", {usage.blocked_calls} more blocked by the token budget" if usage.blocked_calls else "") + ")")


if TYPE_CHECKING:
    from bot.stages.init.draft import ContractDraft
    from bot.stages.init.scan import RepoSummary
