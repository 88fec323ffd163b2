"""What ``infrarsi run`` prints while it runs: each search event as one line on stderr, its figures said in plain
words the first time they appear, and an ETA that counts the verification still to come.

The search (:mod:`bot.stages.run.search`) emits events as dicts; this module only renders them. The ETA of a
trial line is the search's own (trials left x their mean cost) plus verification: ``verify.top_k`` candidates
at the doctor's ``verify_pairs`` interleaved pairs (two trials each) at the same mean cost, an upper bound
since a candidate that cannot win is not verified.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.doctor import noise_lines
from infrarsi.contract.model import Contract

if TYPE_CHECKING:
    from infrarsi.doctor import DoctorReport

__all__ = ["ORIGINS", "RunProgress", "doctor_loader"]

#: Who proposed a trial (the ``[origin]`` of a trial line), in plain words.
ORIGINS = {
    "bank": "a configuration that won on a similar job (the experience bank)",
    "prior": "a knob or patch the prior table expects to help",
    "spread": "a space-filling pick, far from everything tried",
    "neighbour": "one change from a good trial",
    "enumerate": "the model's best guess among every candidate",
    "sample": "the model's best guess among sampled candidates",
    "pairing": "a memory-hungry speedup paired with a memory saver",
}


@dataclass(kw_only=True)
class RunProgress:
    """Renders one run's events; ``load_doctor(run_id)`` reads the doctor's report once the search starts."""

    contract: Contract
    run_id: str
    as_json: bool = False
    load_doctor: Callable[[str], DoctorReport | None] = lambda run_id: None
    write: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    _costs: list[float] = field(default_factory=list, init=False)  # the cost of each trial so far
    _pairs: int | None = field(default=None, init=False)  # the doctor's verify_pairs, once the search starts
    _verdicts: int = field(default=0, init=False)
    _said: set[str] = field(default_factory=set, init=False)  # what was explained already

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            print(json.dumps(event, sort_keys=True, default=str), flush=True)
            return
        kind = event["event"]
        if kind == "trial":
            self._trial(event)
        elif kind == "verdict":
            self._verdicts += 1
            sp = f" {event['speedup']:.2f}x" if event.get("speedup") else ""
            self.write(f"  verdict: {event['verdict']}{sp} — {event['candidate']}")
        elif kind == "control" and event.get("step_time_s") and event.get("drift"):
            self._control(event)
        elif kind == "stage" and event.get("stage") == "search":
            self._explain_noise()
            self.write(f"  {event['message']}")
        elif kind == "stage" and event.get("stage") == "verify":
            left = self.verification_s(self.contract.verify.top_k - self._verdicts)
            self.write(f"  {event['message']}" + (f" (verification ETA at most {left / 60:.1f} min)" if left else ""))
        else:
            self.write(f"  {event.get('message', event)}")

    def verification_s(self, candidates: int) -> float | None:
        """Seconds of verification for ``candidates`` at most, at the mean trial cost so far (None: unknown)."""
        if not self._costs or self._pairs is None:
            return None
        return max(0, candidates) * self._pairs * 2 * statistics.fmean(self._costs)

    def _trial(self, event: dict[str, Any]) -> None:
        if event.get("cost_s"):
            self._costs.append(float(event["cost_s"]))
        if "origin" not in self._said:
            self._said.add("origin")
            self.write("  (each trial line: [who proposed it] outcome: step time (speedup against the baseline "
                       "measured nearest in time) — candidate | best so far, failures, ETA)")
        origin = event["origin"]
        if origin not in self._said and origin in ORIGINS:
            self._said.add(origin)
            self.write(f"  [{origin}]: {ORIGINS[origin]}")
        best = f"best {event['best_speedup']:.2f}x" if event.get("best_speedup") else "best -"
        step = f"{event['step_time_s'] * 1000:.1f} ms" if event.get("step_time_s") else event["reason"][:60]
        if event.get("speedup"):  # against the baseline as the machine ran at the time (infrarsi/search/drift)
            ref = f"control {event['control_trial']}" if event.get("control_trial") else "doctor"
            step += f" ({event['speedup']:.2f}x vs {ref})"
        search = event["eta_s"]
        verify = self.verification_s(self.contract.verify.top_k)
        eta = f"ETA {(search + (verify or 0.0)) / 60:.1f} min" + (
            f" ({search / 60:.1f} search + at most {verify / 60:.1f} verification)" if verify else "")
        self.write(f"  trial {event['n']}/{event['total']} [{origin}] {event['outcome']}: {step} — "
                   f"{event['candidate']} | {best}, {event['failures']} failed ({event['failed_cost_s']:.0f} s), "
                   f"{eta}")

    def _control(self, event: dict[str, Any]) -> None:
        speed = float(event["drift"])
        how = "slower" if speed > 1 else "faster"
        self.write(f"  baseline control (trial {event['trial_no']}): {event['step_time_s'] * 1000:.1f} ms/step, "
                   f"{speed:.2f}x the doctor's step time (the machine runs {abs(speed - 1):.0%} {how} than when "
                   f"the doctor measured it); the trials around it are compared with it (next control after "
                   f"{event['next_after']} trials)")

    def _explain_noise(self) -> None:
        doctor = self.load_doctor(self.run_id)
        if doctor is None or "noise" in self._said:
            return
        self._said.add("noise")
        self._pairs = doctor.verify_pairs
        for line in noise_lines(doctor, self.contract.verify):
            self.write(f"  {line}")


def doctor_loader(root: Path) -> Callable[[str], DoctorReport | None]:
    """``RunProgress.load_doctor`` for the repo at ``root``."""
    def load(run_id: str) -> DoctorReport | None:
        from bot.stages.doctor.baseline import load_doctor

        return load_doctor(root, run_id)
    return load
