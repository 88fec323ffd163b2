"""Proposers: the built-in one (offline, the default) and the anthropic one (``--proposer anthropic``).

Both implement :class:`infrarsi.seams.proposer.Proposer`; ``make_proposer`` is the one
place that turns a name and its settings into an instance.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.proposers.llm import LLMConfig
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.rundir import llm_cache_dir
from infrarsi.seams.proposer import ContractDrafter, Proposer

PROPOSERS = ("builtin", "anthropic")


class ProposerSetupError(InfraRSIError, ValueError):
    """The proposer cannot be built (no API key for the anthropic proposer, an unknown name)."""

    exit_code = BAD_INPUT


def make_proposer(name: str, *, config: LLMConfig | None = None, cache_dir: Path | None = None,
                  api_key: str | None = None, drafter: ContractDrafter | None = None) -> Proposer:
    """``drafter``: the init stage's static drafter, for the built-in proposer's ``draft_contract``."""
    if name == "builtin":
        from bot.proposers.builtin import BuiltinProposer

        return BuiltinProposer(drafter=drafter)
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
    # The built-in proposer pulls in the search engine; the CLI parser imports this
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
    parser.add_argument("--llm-token-budget", type=_tokens, default=None, metavar="N",
                        help="anthropic proposer: input+output tokens per run (default 200000; 0: unlimited)")
    parser.add_argument("--llm-cache", default=None, metavar="DIR",
                        help=f"anthropic proposer: response cache (default <repo>/{llm_cache_dir(Path())})")


def _tokens(text: str) -> int:
    """``--llm-token-budget``: an integer >= 0 (0: unlimited), checked where it is parsed."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 (0: unlimited), got {text!r}")
    return value


def _default_model() -> str:
    from bot.proposers.llm import DEFAULT_MODEL

    return DEFAULT_MODEL


def proposer_from_args(args: argparse.Namespace, root: Path, *, drafter: ContractDrafter | None = None) -> Proposer:
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
    return make_proposer(args.proposer, config=config, cache_dir=cache, drafter=drafter)


def spent_text(proposer: Proposer) -> str:
    """`` (spent N tokens, $X in K request(s))`` when the proposer spent anything: every command that spent
    tokens says so, also when it fails."""
    usage = proposer.usage()
    if not usage.tokens and not usage.calls:
        return ""
    return (f" (spent {usage.tokens} tokens, ${usage.cost_usd:.4f} in {usage.calls} request(s)"
            + (f", {usage.blocked_calls} more blocked by the token budget" if usage.blocked_calls else "") + ")")

