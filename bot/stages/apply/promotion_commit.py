"""The promotion commit: the winner's tree diff on a base, its knob values written where the job reads them.

One commit on ``infrarsi/promote/<run-id>``, parent: the base branch's tip.
It holds three things:

- the code patches, as the three-way merge of the winner's trial commit onto the
  base (the trial commit's own tree diff, never a re-application of the codemods);
- the knob values, written where the repository's normal launch picks them up:
  a flag knob's ``add_argument(FLAG, default=...)`` in the entry script
  (rewritten with libcst), and every knob's ``default`` in the contract, which is
  the baseline InfraRSI measures from then on;
- the lock (``infrarsi.lock``) re-taken over that tree, because the promotion
  deliberately changes what the contract records as the baseline.

Re-creating the commit on a moved base is the same function with another base
(Renovate's way): no rebase of anybody's commits. Git is reached only through
the :class:`~infrarsi.seams.workspace.Workspace` the caller gives.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import tomlkit

from bot.workspace.errors import MergeConflictError
from bot.workspace.identity import BOT_IDENTITY, format_message
from infrarsi.contract import load_contract
from infrarsi.contract.entry import entry_file
from infrarsi.contract.knob_codec import python_text, toml_text
from infrarsi.contract.lock import LOCK_FILE, write_lock
from bot.workspace.naming import promote_branch
from infrarsi.contract.model import Contract, Knob, KnobValue
from infrarsi.errors import NOT_RIGHT, InfraRSIError
from infrarsi.seams.workspace import Workspace
from infrarsi.source_text import encode_source, read_source

__all__ = ["PromotionError", "PromotionCommit", "promotion_branch", "build_promotion_commit", "human_commits",
           "set_argparse_defaults", "set_contract_defaults"]

class PromotionError(InfraRSIError):
    """The promotion commit cannot be made (a conflict, a missing trial commit); the message says why."""

    exit_code = NOT_RIGHT


@dataclass(frozen=True, kw_only=True, slots=True)
class PromotionCommit:
    sha: str
    base: str
    tree: str
    written: tuple[str, ...]  # "path: what" lines for the PR and --dry-run
    unwritten: tuple[str, ...]  # knobs the repo's launch cannot pick up from a file (env vars)


def promotion_branch(run_id: str) -> str:
    return promote_branch(run_id)


# -- knob writers -------------------------------------------------------------------------------------


def _literal(value: KnobValue, old: cst.BaseExpression | None) -> cst.BaseExpression:
    """``value`` as the codec writes a Python literal, in the style of the literal it replaces."""
    quote = old.quote if isinstance(old, cst.SimpleString) and old.quote in ('"', "'") else '"'
    return cst.parse_expression(python_text(value, quote=quote, bool_as_int=isinstance(old, cst.Integer)))


class _Defaults(cst.CSTTransformer):
    def __init__(self, values: dict[str, KnobValue]) -> None:
        self.values = values
        self.done: set[str] = set()

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name != "add_argument" or not updated.args:
            return updated
        flags = {a.value.evaluated_value for a in updated.args
                 if a.keyword is None and isinstance(a.value, cst.SimpleString)}
        flag = next((f for f in flags if f in self.values), None)
        if flag is None:
            return updated
        self.done.add(flag)
        args = list(updated.args)
        for i, a in enumerate(args):
            if a.keyword is not None and a.keyword.value == "default":
                args[i] = a.with_changes(value=_literal(self.values[flag], a.value))
                return updated.with_changes(args=args)
        new = cst.Arg(keyword=cst.Name("default"), value=_literal(self.values[flag], None),
                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(args=[*args, new])


def set_argparse_defaults(source: str, values: dict[str, KnobValue]) -> tuple[str, set[str]]:
    """``source`` with ``add_argument(FLAG, default=VALUE)`` set for each flag in ``values``; which flags were found."""
    module = cst.parse_module(source)
    transformer = _Defaults(values)
    return module.visit(transformer).code, transformer.done


def set_contract_defaults(text: str, values: dict[str, KnobValue]) -> tuple[str, set[str]]:
    """The contract text with ``default`` of each knob in ``values`` set; every comment and blank line stays.

    The contract is edited as a ``tomlkit`` document, in ``infrarsi.toml`` or under
    ``[tool.infrarsi]`` of a ``pyproject.toml``; knobs it does not hold are left out of
    the returned set.
    """
    doc = tomlkit.parse(text)
    tool = doc.get("tool", {})
    table = tool["infrarsi"] if "knobs" not in doc and "infrarsi" in tool else doc
    knobs = table.get("knobs", {})
    done: set[str] = set()
    for name, value in values.items():
        knob = knobs.get(name)
        if knob is not None and "default" in knob:
            knob["default"] = value
            done.add(name)
    return doc.as_string(), done


# -- the commit -------------------------------------------------------------------------------------


def human_commits(workspace: Workspace, head: str, base: str) -> list[str]:
    """Commits on ``head`` since it left ``base``'s history that the bot did not commit ("sha author" lines)."""
    return [f"{c.sha[:10]} {c.author_name} <{c.author_email}>" for c in workspace.commits_since(head, base)
            if c.committer_email != BOT_IDENTITY.email]


def _entry_file(contract: Contract) -> str | None:
    return entry_file(contract.root, contract.workload.workdir, contract.workload.command)


def build_promotion_commit(workspace: Workspace, *, contract: Contract, trial_commit: str, base: str,
                           knobs: dict[str, KnobValue], message: str, trailers: dict[str, str]) -> PromotionCommit:
    """Make (not yet on any branch) the promotion commit of ``trial_commit``'s change on ``base``."""
    if not workspace.has_commit(trial_commit):
        raise PromotionError(f"trial commit {trial_commit[:10]} is not in {contract.root}; was the trial branch "
                             "removed by `infrarsi gc`?")
    base_sha = workspace.commit_info(base).sha
    try:
        merged = workspace.merge_change(trial_commit, onto=base_sha)
    except ValueError as exc:
        raise PromotionError(f"trial commit {trial_commit[:10]} has no parent to diff against") from exc
    except MergeConflictError as exc:
        raise PromotionError(f"the winner's change conflicts with {base} ({base_sha[:10]}) in "
                             f"{', '.join(exc.paths)}; rerun the search on the new base") from exc
    changed = {k: v for k, v in knobs.items() if v != contract.knob(k).default}
    written: list[str] = []
    unwritten: list[str] = []
    with tempfile.TemporaryDirectory(prefix="infrarsi-promote-") as tmp:
        work = Path(tmp)
        workspace.export_tree(merged, work)
        touched: list[str] = []
        entry = _entry_file(contract)
        flags = {contract.knob(k).flag: v for k, v in changed.items()
                 if contract.knob(k).flag and contract.knob(k).env is None}
        if flags and entry and (work / entry).is_file():
            code, found = set_argparse_defaults(read_source(work / entry), flags)
            if found:
                (work / entry).write_bytes(encode_source(code))
                touched.append(entry)
                written += [f"{entry}: add_argument({f!r}, default={flags[f]!r})" for f in sorted(found)]
            unwritten += [f"{f} {flags[f]} (no add_argument({f!r}) in {entry})" for f in sorted(set(flags) - found)]
        for name, value in changed.items():
            knob: Knob = contract.knob(name)
            if knob.env is not None:
                unwritten.append(f"{knob.env}={knob.codec.to_cli(value)} (an environment variable: set it in the "
                                 "launcher)")
            elif knob.override is not None:
                unwritten.append(f"{knob.override}={knob.codec.to_cli(value)} (a Hydra override: set it in the "
                                 "job's config)")
        source = contract.source.relative_to(contract.root).as_posix()
        text, done = set_contract_defaults((work / source).read_text(encoding="utf-8"), changed)
        if changed and done != set(changed):
            raise PromotionError(f"{source}: could not find the default of knob(s) "
                                 f"{', '.join(sorted(set(changed) - done))} to update")
        if changed:
            (work / source).write_text(text, encoding="utf-8")
            touched.append(source)
            written += [f"{source}: knobs.{k}.default = {toml_text(v)}" for k, v in sorted(changed.items())]
        write_lock(load_contract(work))
        touched.append(LOCK_FILE)
        written.append(f"{LOCK_FILE}: re-taken over the promoted tree")
        files = {rel: (work / rel).read_bytes() for rel in touched}
    sha, tree = workspace.commit_files(tree=merged, files=files, parents=[base_sha],
                                       message=format_message(message, trailers))
    return PromotionCommit(sha=sha, base=base_sha, tree=tree, written=tuple(written), unwritten=tuple(unwritten))
