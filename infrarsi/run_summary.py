"""What a finished run hands the report and apply stages: ``run.json`` as a versioned, frozen record.

``infrarsi run`` writes it once the search and verification are over; the
report reads it back with :meth:`RunSummary.from_dict`. A ``run.json`` written
before the record had a version (version 1) is upgraded when read, never
rewritten in place. The figures derived from the trials (the cost of failures,
the OOMs, the best verdict) are computed, not stored twice, so they cannot
disagree with the trials they come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from infrarsi.trial_record import Outcome, TrialRecord
from infrarsi.verdict import Verdict

#: 1: the dict ``run.json`` held before it had a version; 2: this record; 3: the search's baseline controls and
#: each trial's drift-adjusted step time (absent in a 2, they read as none).
RUN_SUMMARY_VERSION = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchTrial:
    """One trial of the search as the run's summary lists it (the journal holds the full record)."""

    trial_no: int
    candidate: str
    outcome: str
    reason: str = ""
    step_time_s: float | None = None
    peak_mem_bytes: int | None = None
    peak_mem_censored: bool = False
    cost_s: float = 0.0
    commit: str | None = None
    # The step time read at the doctor's machine speed (infrarsi.search.drift), and against which baseline
    adjusted_step_time_s: float | None = None
    against: str = ""
    # Measured while the machine changed speed and measured again beside a new control: not counted
    superseded: bool = False

    @staticmethod
    def of(record: TrialRecord, *, adjusted: TrialRecord | None = None, against: str = "",
           superseded: bool = False) -> SearchTrial:
        m = record.metrics
        return SearchTrial(trial_no=record.trial_no, candidate=record.candidate.describe(),
                           outcome=record.outcome.value, reason=record.reason, step_time_s=m.step_time_s,
                           peak_mem_bytes=m.peak_mem_bytes, peak_mem_censored=m.peak_mem_censored,
                           cost_s=record.cost_s, commit=record.commit,
                           adjusted_step_time_s=adjusted.metrics.step_time_s if adjusted is not None else None,
                           against=against, superseded=superseded)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """A finished run: its search trials, every verdict, the model's posterior and the proposer's cost."""

    version: int = RUN_SUMMARY_VERSION
    run_id: str
    baseline_step_s: float
    trials: tuple[SearchTrial, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    posterior: Mapping[str, Any] | None = None  # the search engine's prior-versus-posterior report
    llm: Mapping[str, Any] | None = None  # the proposer's cost and proposals
    controls: tuple[SearchTrial, ...] = ()  # the baseline re-run during the search (infrarsi.search.drift)

    @property
    def best(self) -> Verdict | None:
        """The promoted verdict with the largest speedup, if any."""
        promoted = [v for v in self.verdicts if v.promoted]
        return max(promoted, key=lambda v: v.speedup or 0.0) if promoted else None

    @property
    def failed(self) -> tuple[SearchTrial, ...]:
        return tuple(t for t in self.trials if t.outcome != Outcome.OK.value)

    @property
    def failed_cost_s(self) -> float:
        return sum(t.cost_s for t in self.failed)

    @property
    def oom(self) -> tuple[SearchTrial, ...]:
        return tuple(t for t in self.trials if t.outcome == Outcome.OOM.value)

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            "version": self.version,
            "run_id": self.run_id,
            "baseline_step_s": self.baseline_step_s,
            "trials": [asdict(t) for t in self.trials],
            "failed_cost_s": self.failed_cost_s,
            "oom": [{"trial_no": t.trial_no, "candidate": t.candidate, "cost_s": t.cost_s,
                     "peak_mem_bytes": t.peak_mem_bytes} for t in self.oom],
            "verdicts": [v.to_dict() for v in self.verdicts],
            "best": best.to_dict() if best else None,
            "posterior": dict(self.posterior) if self.posterior is not None else None,
            "llm": dict(self.llm) if self.llm is not None else None,
            "controls": [asdict(t) for t in self.controls],
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> RunSummary:
        data = upgrade(dict(data))
        fields = set(SearchTrial.__dataclass_fields__)
        return RunSummary(
            version=data["version"], run_id=str(data["run_id"]), baseline_step_s=float(data["baseline_step_s"]),
            trials=tuple(SearchTrial(**{k: v for k, v in t.items() if k in fields}) for t in data["trials"]),
            verdicts=tuple(Verdict.from_dict(v) for v in data["verdicts"]),
            posterior=data.get("posterior"), llm=data.get("llm"),
            controls=tuple(SearchTrial(**{k: v for k, v in t.items() if k in fields})
                           for t in data.get("controls") or ()))


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a stored ``run.json`` up to the current version.

    Version 1 (no ``version`` key) stored ``best``, ``failed_cost_s`` and ``oom``
    beside the trials and verdicts they derive from; they are derived again here.
    Its verdicts may lack the full record, which :meth:`Verdict.from_dict` upgrades.
    """
    version = int(data.get("version", 1))
    if version > RUN_SUMMARY_VERSION:
        raise ValueError(f"run.json has version {version}, newer than this InfraRSI reads ({RUN_SUMMARY_VERSION})")
    if version == 1:
        data.setdefault("trials", [])
        data.setdefault("verdicts", [])
        data.setdefault("baseline_step_s", float("nan"))
    data["version"] = RUN_SUMMARY_VERSION
    return data
