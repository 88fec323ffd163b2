"""Was a trial disturbed from outside? A burst of load on a shared machine must not decide a verdict.

On these machines (and on shared GPU nodes) another process can take a core for
half a minute: two runs of one arm then take 3-5x as long, and four pairs of a
sequential verification read that as "no speedup". A run disturbed so is
re-run, not counted (``bot/stages/run/verify.py``). It is told from a slow
candidate by what the launcher measured around it (``TrialMetrics.host``,
``bot/executors/host_load.py``), against the same arm's undisturbed runs (or,
for its first runs, the baseline's), never by its step time:

- **steal**: the hypervisor ran someone else on this VM's CPUs for more than
  :data:`STEAL_SHARE` of the trial (summed over CPUs, per CPU);
- **pressure**: the kernel's CPU pressure stall (``/proc/pressure/cpu``
  ``some``: time in which a runnable task waited for a CPU) was more than
  :data:`PSI_EXCESS` of the trial's wall time above the reference runs' median
  (the trial's own threads contend a little with each other: that share is in
  the reference);
- **starved**: the trial's process tree got less than :data:`CPU_SHARE` of the
  CPU seconds per wall second its arm's reference runs got.

Pure: the records carry the counters; the rule is here, its thresholds
documented in docs/doctor.md ("Disturbed runs").
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from infrarsi.trial_record import Outcome, TrialRecord

STEAL_SHARE = 0.05
PSI_EXCESS = 0.25
PSI_ALONE = 0.6  # without a reference run: a stall share above this is a disturbance on its own
CPU_SHARE = 0.6


def _shares(record: TrialRecord) -> dict[str, float]:
    host = dict(record.metrics.host)
    wall = record.metrics.wall_s
    if wall <= 0:
        return {}
    out: dict[str, float] = {}
    cpus = max(1.0, host.get("cpus", 1.0))
    if "steal_s" in host:
        out["steal"] = host["steal_s"] / cpus / wall
    if "psi_some_s" in host:
        out["psi"] = host["psi_some_s"] / wall
    if "cpu_s" in host:
        out["cpu"] = host["cpu_s"] / wall
    return out


def disturbance(record: TrialRecord, reference: Sequence[TrialRecord], *, same_arm: bool = True,
                alone: bool = True) -> str | None:
    """Why ``record`` looks disturbed from outside, against ``reference`` (undisturbed runs of the same arm,
    or — ``same_arm=False`` — of the baseline, whose CPU use says nothing of another configuration's); None
    when it does not, or when nothing was measured to say so. ``alone=False``: with no reference run the
    pressure says nothing (a job that oversubscribes the CPUs by itself stalls its own threads; the doctor's
    first baseline run is judged against the later ones instead)."""
    if record.outcome is not Outcome.OK:
        return None
    mine = _shares(record)
    refs = [s for s in (_shares(r) for r in reference if r.outcome is Outcome.OK) if s]
    if mine.get("steal", 0.0) > STEAL_SHARE:
        return (f"trial {record.trial_no}: the hypervisor took {mine['steal']:.0%} of each CPU during the trial "
                "(steal time)")
    psi_ref = [s["psi"] for s in refs if "psi" in s]
    if "psi" in mine:
        usual = statistics.median(psi_ref) if psi_ref else None
        if (mine["psi"] - usual > PSI_EXCESS) if usual is not None else (alone and mine["psi"] > PSI_ALONE):
            against = f"against {usual:.0%} in undisturbed runs" if usual is not None else "with no run to compare"
            return (f"trial {record.trial_no}: runnable tasks waited for a CPU {mine['psi']:.0%} of the trial "
                    f"(/proc/pressure/cpu), {against}")
    cpu_ref = [s["cpu"] for s in refs if "cpu" in s] if same_arm else []
    if "cpu" in mine and cpu_ref:
        usual = statistics.median(cpu_ref)
        if usual > 0 and mine["cpu"] < CPU_SHARE * usual:
            return (f"trial {record.trial_no}: its processes got {mine['cpu']:.2f} CPU-seconds per second, against "
                    f"{usual:.2f} in undisturbed runs of the same arm")
    return None
