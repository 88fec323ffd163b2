"""A bench for judging one candidate the way verification does: witnessed, against the baseline's reference.

A bench is a git repo of a fixture in a tiny configuration, its baseline's
witnessed repeats (the doctor's reference and loss band, built by the same
functions the doctor uses) and a method that runs one candidate — a knob
assignment and/or patches, through the same worktree/patch/audit path
model-written patches take — and returns its outcome with every invariant.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from pathlib import Path

from bot.executors.local import LocalExecutor
from bot.workspace import GitWorkspace
from bot.stages.doctor.baseline import calibrate_work
from bot.stages.run.candidate import TrialContext, trial_context
from bot.stages.run.references import References
from infrarsi.rundir import journal_path
from tests.support.repos import commit_tree
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.invariants import InvariantCheck, WorkReference
from infrarsi.journal import Journal
from infrarsi.loss_band import LossBand
from infrarsi.patches import PatchSpec
from infrarsi.seams.executor import Executor
from infrarsi.trial_record import QUARANTINED, Candidate, Outcome, TrialRecord
from infrarsi.verdict import trial_invariants
from tests.support.tinygpt import REPO, infrarsi

# Three blocks, so that skipping blocks is possible; milliseconds per step. With dropout: a re-split draws other
# masks, so a candidate that splits the global batch otherwise must be compared with a baseline at its split.
GPT_ARGS = ("--n-layer 3 --n-head 4 --d-model 32 --vocab-size 128 --seq-len 16 --global-batch 4 --steps 8 "
            "--dropout 0.1")
GPT_TOKENS = 4 * 16
# The same model data-parallel on two ranks; --steps beyond the measured ones: the bot ends it.
# Four rows a rank, so its default micro-batch of 2 makes two micro-batches on each: a cheat that drops or defers
# micro-batches has something to drop on every path (with one micro-batch a rank it is the baseline, and "ok").
DDP_ARGS = ("--n-layer 3 --n-head 4 --d-model 32 --vocab-size 128 --seq-len 16 --global-batch 8 --steps 100 "
            "--seed 1234 --lr 6e-4 --dropout 0.1")
DDP_TOKENS = 8 * 16
# Another split than each fixture's default, with two micro-batches or more (so a cheat that defers part of
# them, read_ahead, really defers some): tinygpt 2 → 1, ddp 2 → 1 (four micro-batches a rank), tinymoe 4 → 2.
RESPLIT = {"tinygpt": {"micro_batch": 1}, "ddp": {"micro_batch": 1}, "tinymoe": {"micro_batch": 2}}
MOE_ARGS = ("--n-layer 2 --n-head 2 --d-model 32 --n-experts 4 --top-k 2 --d-expert 32 --capacity-factor 0 "
            "--aux-loss-coef 0.01 --vocab-size 128 --seq-len 16 --global-batch 4 --steps 8 --seed 1234 --lr 6e-4")
MOE_TOKENS = 4 * 16


def gpt_repo(dest: Path, args: str = GPT_ARGS) -> Path:
    """tinygpt with a contract drafted by ``infrarsi init`` for ``args``, committed."""
    repo = dest / "tinygpt"
    shutil.copytree(REPO / "fixtures" / "tinygpt", repo,
                    ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.*"))
    result = infrarsi("init", str(repo), "--command", f"python train.py {args}")
    assert result.returncode == 0, result.stderr
    return _commit(repo)


def fp32_only(repo: Path) -> Path:
    """``repo``'s contract with bf16 taken out of its dtype knob (re-locked, committed): a job whose precision is
    float32 only, where lowering float32 math (TF32, bf16 passes) is not the same task."""
    toml = (repo / "infrarsi.toml").read_text()
    assert 'values = ["fp32", "bf16"]' in toml, "the drafted dtype knob"
    (repo / "infrarsi.toml").write_text(toml.replace('values = ["fp32", "bf16"]', 'values = ["fp32"]'))
    result = infrarsi("lock", str(repo))
    assert result.returncode == 0, result.stderr
    commit_tree(repo, "float32 only")
    return repo


def moe_repo(dest: Path, args: str = MOE_ARGS, tokens: int = MOE_TOKENS) -> Path:
    """tinymoe with its own contract, rewritten for ``args``, locked and committed."""
    return _own_contract("tinymoe", dest, args, tokens, (
        ("value = 16\n", "value = 4\n"), ("values = [1, 2, 4, 8, 16]", "values = [1, 2, 4]"),
        ("default = 4\nflag = \"--micro-batch\"", "default = 2\nflag = \"--micro-batch\"")))


def ddp_repo(dest: Path, args: str = DDP_ARGS, tokens: int = DDP_TOKENS) -> Path:
    """The DDP fixture with its own contract (two ranks under torchrun), rewritten for ``args``, locked and
    committed."""
    return _own_contract("ddp", dest, args, tokens, (
        ("value = 8\nreason = \"micro-batches split each rank's 8 rows\"",
         "value = 2\nreason = \"micro-batches split each rank's 2 rows\""),
        ("values = [1, 2, 4, 8]\ndefault = 2\nflag = \"--micro-batch\"",
         "values = [1, 2]\ndefault = 2\nflag = \"--micro-batch\"")))


def _own_contract(fixture: str, dest: Path, args: str, tokens: int, edits: tuple[tuple[str, str], ...]) -> Path:
    """A fixture that ships its contract, the contract's args, tokens and ``edits`` rewritten, locked, committed."""
    repo = dest / fixture
    shutil.copytree(REPO / "fixtures" / fixture, repo,
                    ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.lock"))
    toml = (repo / "infrarsi.toml").read_text()
    toml = re.sub(r'^args = ".*"$', f'args = "{args}"', toml, count=1, flags=re.M)
    toml = re.sub(r"^tokens_per_step = \d+$", f"tokens_per_step = {tokens}", toml, count=1, flags=re.M)
    for old, new in edits:
        toml = toml.replace(old, new)
    (repo / "infrarsi.toml").write_text(toml)
    result = infrarsi("lock", str(repo))
    assert result.returncode == 0, result.stderr
    return _commit(repo)


def _commit(repo: Path) -> Path:
    (repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    commit_tree(repo, "fixture with its contract")
    return repo


@dataclass(frozen=True, kw_only=True, slots=True)
class Judged:
    record: TrialRecord
    checks: tuple[InvariantCheck, ...]

    @property
    def quarantined(self) -> bool:
        """Never ran: it added what a speed patch never needs, and waits for a person (bot/patching/suspicious.py)."""
        return self.record.outcome is Outcome.REJECTED and self.record.reason.startswith(QUARANTINED)

    @property
    def verdict(self) -> str:
        """``quarantined`` (never ran, left for a person), ``rejected`` (never ran), ``invalid`` (an outcome or an
        invariant broke), ``unverified`` (a row could not be checked) or ``ok``."""
        if self.quarantined:
            return "quarantined"
        if self.record.outcome is Outcome.REJECTED:
            return "rejected"
        if any(c.broken for c in self.checks):
            return "invalid"
        return "ok" if all(c.ok for c in self.checks) else "unverified"

    @property
    def caught_by(self) -> str:
        if self.quarantined:
            return "quarantine: " + self.record.reason.removeprefix(QUARANTINED)[:160]
        if self.record.outcome is Outcome.REJECTED:
            return "scope audit / patch application: " + self.record.reason[:160]
        broken = [c for c in self.checks if c.broken]
        return "; ".join(f"{c.name}" for c in broken) if broken else "-"

    @property
    def first(self) -> str:
        """The check that caught it first (the table's cell): the outcome's reason names the witness or the lock."""
        if self.quarantined:
            return "quarantine"
        if self.record.outcome is Outcome.REJECTED:
            return "rejected (scope audit)"
        broken = [c for c in self.checks if c.broken]
        if not broken:
            return self.verdict
        if broken[0].name == "outcome":
            reason = self.record.reason
            return "witness" if reason.startswith("witness:") else "lock" if reason.startswith("lock") else \
                reason.split(":")[0][:40]
        return broken[0].name

    def reason(self) -> str:
        if self.record.outcome is Outcome.REJECTED:
            return self.record.reason
        return next((f"{c.name}: {c.detail}" for c in self.checks if not c.ok), "")


@dataclass(kw_only=True)
class Bench:
    """One fixture's repository, its witnessed baseline and the references candidates are held to, on one
    executor."""

    repo: Path
    ctx: TrialContext
    references: References
    baseline: list[TrialRecord] = field(default_factory=list)

    @property
    def reference(self) -> WorkReference:
        work = self.references.doctor.work
        assert work is not None
        return work

    @property
    def band(self) -> LossBand:
        band = self.references.doctor.loss_band
        assert band is not None
        return band

    @staticmethod
    def open(repo: Path, *, executor: Executor | None = None, repeats: int = 2, run_id: str = "redteam") -> Bench:
        contract = load_contract(repo)
        journal = Journal(journal_path(repo))
        journal.ensure_run(run_id, kind="run")
        ctx = trial_context(contract, read_lock(repo), workspace=GitWorkspace(repo),
                            executor=executor or LocalExecutor(), journal=journal)
        baseline = Candidate.of(contract.defaults())
        records = [ctx.run(run_id, baseline, witness=True) for _ in range(repeats)]
        assert all(r.outcome is Outcome.OK for r in records), [(r.reason, r.stderr_tail[-800:]) for r in records]
        reference, band, _ = calibrate_work(ctx, run_id=run_id, records=records)
        assert reference is not None
        doctor = SimpleNamespace(work=reference, loss_band=band, notes=())  # what References reads of the doctor
        return Bench(repo=repo, ctx=ctx, references=References(ctx=ctx, run_id=run_id, doctor=doctor),  # type: ignore[arg-type]
                     baseline=records)

    def judge(self, *, knobs: Mapping[str, object] = (), patches: tuple[PatchSpec, ...] = (),
              run_id: str = "redteam") -> Judged:
        """One candidate, witnessed, held to the reference verification would hold it to (at its own split)."""
        contract = self.ctx.contract
        values = {**contract.defaults(), **dict(knobs)}
        candidate = Candidate.of(values, tuple(p.id for p in patches))
        ctx = TrialContext(**{**{f: getattr(self.ctx, f) for f in ("contract", "lock", "repo", "executor",
                                                                    "journal", "base", "workspace")},
                              "patches": {**self.ctx.patches, **{p.id: p for p in patches}}})
        reference, extra = self.references.for_candidate(candidate)
        record = ctx.run(run_id, candidate, witness=True)
        return Judged(record=record, checks=(*extra, *trial_invariants(record, reference)))
