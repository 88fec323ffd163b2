"""Tokens per step measured, where ``init`` cannot read them from the code: one short witnessed run.

The witness counts what one optimizer step consumes — the token ids that reach
an embedding, or the targets that reach the loss (a sample each for a
classifier or a regression) — summed over ranks (docs/trials.md, "The
witness"). ``init`` runs the baseline once with it, as ``check --run`` does,
and drafts that count with a note saying it was measured; when the run cannot
say (it crashes, or nothing reached an embedding or a loss), the user is asked
for ``--tokens-per-step`` with the reason.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from infrarsi.contract.model import Contract
from infrarsi.invariants import rank_reports, step_tokens, witnessed_report
from infrarsi.measure import error_line, summarize
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.witness import WitnessReport


def measure_tokens(contract: Contract, *, timeout_s: float | None = None) -> tuple[int | None, str]:
    """(tokens one optimizer step consumed, how they were counted), or (None, why not)."""
    from bot.executors.registry import build_executor
    from bot.stages.run.run_trial import trial_spec, witness_step

    baseline = Candidate.of(contract.defaults())
    with tempfile.TemporaryDirectory(prefix="infrarsi-tokens-") as tmp:
        spec = trial_spec(contract, baseline, tree=contract.root, memory_limit_bytes=None,
                          timeout_s=timeout_s or contract.budget.trial_timeout_s, log_dir=Path(tmp))
        execution = build_executor(contract).execute(replace(spec, witness=witness_step(contract)))
    if execution.returncode not in (0, None) and not execution.stopped_after_steps or execution.killed_for:
        how = execution.killed_for or f"exit status {execution.returncode}"
        return None, f"the run failed ({how}): {error_line(execution.stderr_tail)[:200]}"
    if execution.witness_error or execution.witness is None:
        return None, execution.witness_error or execution.witness_skipped or "the witness wrote no report"
    record = TrialRecord(run_id="init", trial_no=0, candidate=baseline, outcome=Outcome.OK,
                         metrics=summarize(execution, warmup=contract.timing.warmup_steps,
                                           measured=contract.timing.measured_steps))
    report = witnessed_report(record)
    tokens = step_tokens(report, list(rank_reports(record).values())) if report is not None else None
    if not tokens:
        return None, "in one optimizer step no token ids reached an embedding and no targets reached a loss"
    return tokens, _how(report, len(record.metrics.witness_ranks) or 1)  # type: ignore[arg-type]


def _how(report: WitnessReport, ranks: int) -> str:
    what = ("token ids reaching an embedding" if (report.tokens_in or 0) >= (report.targets_in or 0)
            else "targets reaching the loss")
    over = f", summed over {ranks} ranks" if ranks > 1 else ""
    return (f"measured: one short run of the baseline, the witness counted the {what} in optimizer step "
            f"{report.count_step}{over}")
