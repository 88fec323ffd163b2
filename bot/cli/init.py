"""``infrarsi init | lock | check | patches``: the contract, its lock, and the patches its scope allows."""

from __future__ import annotations

import argparse
import sys
import json
from pathlib import Path
from typing import Any

from bot.cli.common import UsageError, add_repo_argument, int_at_least, repo_dir
from bot.proposers import ProposerSetupError, add_proposer_arguments, proposer_from_args
from infrarsi.rundir import ensure_state_dir
from infrarsi.contract import ContractError, load_contract
from infrarsi.contract.load import CONTRACT_FILE, find_contract
from infrarsi.contract.lock import LOCK_FILE, read_lock, verify_lock, write_lock
from infrarsi.errors import NOT_RIGHT, InfraRSIError

__all__ = ["LockMismatchError", "register"]


class LockMismatchError(InfraRSIError):
    """``check`` found the tree or the contract changed since the lock was taken: exit status 1."""

    exit_code = NOT_RIGHT


def proposer(args: argparse.Namespace, root: Path):  # noqa: ANN201 - a Proposer
    """The proposer ``--proposer`` names; a missing key or unknown name is bad input."""
    try:
        return proposer_from_args(args, root)
    except ProposerSetupError as e:
        raise UsageError(str(e)) from None


def outside_git(root: Path) -> dict[str, str]:
    """What git does not track in ``root``, from its workspace; nothing outside git."""
    from bot.workspace import GitWorkspace
    from bot.workspace.refs import is_git_repo

    return GitWorkspace(root).outside_git() if is_git_repo(root) else {}


def cmd_init(args: argparse.Namespace) -> int:
    from bot.stages.init.draft import DraftError, draft_contract
    from bot.stages.init.job import missing_script, read_job
    from bot.stages.init.launcher import LaunchError
    from bot.stages.init.scan import scan_repo
    from bot.stages.init.validate import validated

    root = repo_dir(args.repo)
    try:
        path, prefix = find_contract(root)
        exists = True
    except ContractError:
        exists = False
    if exists and not args.force:
        print(f"using the existing contract in {path.relative_to(root)}"
              + (f" [{prefix}]" if prefix else "") + " (pass --force to draft a new one)")
    else:
        if not args.command or not args.command.strip():
            raise UsageError("no contract yet: pass --command \"python train.py ...\" to draft one")
        try:
            job = read_job(args.command, root)
        except LaunchError as e:
            raise UsageError(f"--command: {e}") from None
        if (why := missing_script(root, job.workdir, job.prog)) is not None:
            raise UsageError(f"--command: {why}")
        summary = scan_repo(root, job.entry, outside_git=outside_git(root))
        try:
            draft = (draft_contract(args.command, summary, tokens_per_step=args.tokens_per_step,
                                    step_regex=args.step_regex)
                     if args.proposer == "builtin" else
                     _llm_draft(args, root, summary))
            text, drafted = validated(draft, root)
            if draft.tokens_unread:
                text = _with_measured_tokens(draft, drafted, root)
        except DraftError as e:
            raise UsageError(str(e)) from None
        if job.shell.origin or job.shell.dropped:
            print(f"init: {job.shell.note()}")
        for line in draft.said:
            print(f"init: {line}")
        (root / CONTRACT_FILE).write_text(text, encoding="utf-8")
        print(f"wrote {CONTRACT_FILE}: {len(draft.data.get('knobs', {}))} knobs, "
              f"{len(draft.data['scope']['editable'])} editable symbols, "
              f"{len(draft.data['scope']['locked'])} locked paths; {len(draft.notes)} guessed or defaulted fields "
              "are marked with comments — review them")
    contract = load_contract(root)
    ensure_state_dir(root)
    lock_path = write_lock(contract)
    print(f"wrote {lock_path.name}: {len(read_lock(root).files)} locked files and the contract hashed")
    print(next_steps(args.repo, contract.approvers.users))
    return 0


def next_steps(repo: str, approvers: tuple[str, ...]) -> str:
    """What to do after ``init``, in order: review, commit, one dry run."""
    who = "" if approvers else " and add your login under [approvers] users (who may approve a promotion)"
    return (f"next:\n"
            f"  1. review the lines marked `# guessed:` in {CONTRACT_FILE}{who}; after an edit, "
            f"`infrarsi lock {repo}`\n"
            f"  2. commit {CONTRACT_FILE} and {LOCK_FILE}: trials run the committed HEAD in their own worktrees\n"
            f"  3. `infrarsi check {repo} --run`: one run of the baseline, to see the step lines read as the contract "
            "says")


def _with_measured_tokens(draft, contract, root: Path) -> str:  # noqa: ANN001
    """The draft's text with ``tokens_per_step`` measured by one short witnessed run (the code did not say)."""
    from bot.stages.init.draft import DraftError
    from bot.stages.init.measured_tokens import measure_tokens
    from bot.stages.init.validate import validated

    print(f"init: tokens per step not in the code ({draft.tokens_unread}); measuring them with one short run of "
          "the baseline", file=sys.stderr, flush=True)
    tokens, how = measure_tokens(contract)
    if tokens is None:
        raise DraftError(f"cannot infer the tokens processed per step ({draft.tokens_unread}), and one short run "
                         f"could not count them either ({how}); pass --tokens-per-step N")
    draft.set("workload.tokens_per_step", tokens, how)
    draft.tokens_unread = None
    text, _ = validated(draft, root)
    return text


def _llm_draft(args: argparse.Namespace, root: Path, summary):  # noqa: ANN001, ANN202
    from bot.stages.init.proposed_draft import draft_with

    chosen = proposer(args, root)
    draft = draft_with(chosen, args.command, summary, tokens_per_step=args.tokens_per_step)
    usage = chosen.usage()
    print(f"drafted by the {chosen.name} proposer: {usage.tokens} tokens, ${usage.cost_usd:.4f}"
          + (f" ({usage.cached_calls} cached)" if usage.cached_calls else ""))
    return draft


def cmd_lock(args: argparse.Namespace) -> int:
    root = repo_dir(args.repo)
    contract = load_contract(root)
    write_lock(contract)
    print(f"wrote {LOCK_FILE}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from bot.stages.init.job import missing_script

    root = repo_dir(args.repo)
    contract = load_contract(root)
    if (why := missing_script(root, contract.workload.workdir, contract.workload.command)) is not None:
        raise UsageError(f"{CONTRACT_FILE}: workload.command: {why}")
    lock = read_lock(root)
    broken = verify_lock(contract, lock)
    if broken:
        problems = "; ".join(map(str, broken))
        todo = "" if "infrarsi lock" in problems else " (revert it, or rerun `infrarsi lock` if it is intended)"
        raise LockMismatchError(f"check failed: {len(broken)} problem(s) with {LOCK_FILE}: {problems}{todo}")
    print(f"ok: contract valid; {len(lock.files)} locked files match {LOCK_FILE}; "
          f"{len(contract.knobs)} knobs, {len(contract.scope.editable)} editable symbols")
    from bot.stages.init.data_check import unlisted_lines

    for line in unlisted_lines(contract, outside_git(root)):
        print(f"warning: {line}")
    if args.run:
        from bot.stages.init.dryrun import check_run
        return check_run(contract, root)
    return 0


def cmd_patches(args: argparse.Namespace) -> int:
    from bot.patching.catalog import catalog_for_repo

    root = repo_dir(args.repo)
    contract = load_contract(root)
    found = catalog_for_repo(contract)
    if args.json:
        for a in found:
            print(json.dumps({"id": a.entry.codemod, "title": a.entry.title, "applies": a.applies,
                              "targets": list(a.spec.targets) if a.spec else [], "why_not": list(a.reasons),
                              "effect": a.entry.effect.to_dict()}, sort_keys=True))
        return 0
    for a in found:
        e = a.entry.effect
        prior = f"time x{e.time_ratio:.2f}, memory x{e.mem_ratio:.2f}"
        if a.spec is not None:
            print(f"{a.entry.codemod:<24} applies   {prior}  at {', '.join(a.spec.targets)}")
        else:
            why = a.reasons[0] if a.reasons else "no editable Python file"
            print(f"{a.entry.codemod:<24} no        {prior}  ({why}{' …' if len(a.reasons) > 1 else ''})")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("init", help="draft the contract (infrarsi.toml) and take the lock (infrarsi.lock)")
    add_repo_argument(p)
    p.add_argument("--command", help='the training command, e.g. "python train.py --steps 8"')
    p.add_argument("--tokens-per-step", type=int_at_least(1), metavar="N",
                   help="tokens per optimizer step, at least 1, when init cannot infer it")
    p.add_argument("--force", action="store_true", help="draft a new contract over an existing one")
    p.add_argument("--step-regex", help="the regex of the job's step line (a (?P<loss>...) group), over the guess")
    add_proposer_arguments(p)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("lock", help="re-take the lock after an intended change to the contract or a locked file")
    add_repo_argument(p)
    p.set_defaults(func=cmd_lock)

    p = sub.add_parser("check", help="validate the contract and verify the lock against the tree")
    add_repo_argument(p)
    p.add_argument("--run", action="store_true", help="also run the baseline once: which clock times the steps (the "
                   "job's printed lines or the bot's own), and does it see every step?")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("patches", help="list the built-in patch catalog and where each patch applies in the repo")
    add_repo_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object per catalog patch")
    p.set_defaults(func=cmd_patches)
