"""What was judged stays judged: patches found invalid are not tried or verified again.

A candidate judged ``invalid`` (a verification verdict, or a search trial whose
invariants broke) is blamed on its patches that nothing has vindicated: a patch
is vindicated by a valid verdict, or by a trial whose loss stayed inside the
baseline's band. A patch whose trials crash with the same error under different
knob settings is blamed after that first repeat, like an invalid one: a rewrite
that cannot run (checkpointing a block whose forward registers losses in a global
collector: "Trying to backward through the graph a second time") fails the same
way whatever the knobs, and the crash model alone would keep trying it. A blamed patch is excluded from every later candidate and from
the remaining verification slots; when every patch of the candidate is
vindicated (or it has none) the knobs are to blame and only that candidate is
excluded. The record keeps why, so the report and the next proposal round can
say it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from infrarsi.trial_record import Candidate, TrialRecord

#: What varies between two crashes of the same error: numbers (sizes, ranks, line numbers, addresses).
_VARYING = re.compile(r"0x[0-9a-fA-F]+|\d+(\.\d+)?")


def crash_signature(reason: str) -> str:
    """The error a crashed trial ended in, without how it exited or what varies between runs."""
    error = reason.split(": ", 1)[1] if reason.startswith(("exit status", "killed by signal", "no exit")) \
        and ": " in reason else reason
    return _VARYING.sub("#", error).strip()


@dataclass(kw_only=True)
class Judgements:
    """Patches and candidates judged invalid in one run, with the reason of each."""

    patches: dict[str, str] = field(default_factory=dict)  # patch id → why it is invalid
    candidates: dict[str, str] = field(default_factory=dict)  # candidate digest → why (no patch to blame)
    vindicated: set[str] = field(default_factory=set)  # patches seen valid
    # patch → the crashes of trials holding it: (crash signature, the trial's knobs, trial number)
    crashes: dict[str, list[tuple[str, tuple, int]]] = field(default_factory=dict)

    def vindicate(self, patches: Iterable[str]) -> None:
        self.vindicated.update(patches)

    def judge(self, candidate: Candidate, reason: str) -> tuple[str, ...]:
        """Record ``candidate`` as invalid; returns the patches blamed (empty: the candidate alone)."""
        blamed = tuple(p for p in candidate.patches if p not in self.vindicated)
        for pid in blamed:
            self.patches.setdefault(pid, reason)
        if not blamed:
            self.candidates.setdefault(candidate.digest(), reason)
        return blamed

    def repeated_crash(self, record: TrialRecord) -> tuple[Candidate, str] | None:
        """Note a crashed trial; once its error repeats an earlier crash of the same patch under other knob
        settings, the patches to blame (as a candidate) and why. None: nothing repeated yet."""
        signature, knobs = crash_signature(record.reason), record.candidate.knobs
        repeated: list[str] = []
        earlier: set[int] = set()
        for pid in record.candidate.patches:
            seen = self.crashes.setdefault(pid, [])
            same = [no for sig, other, no in seen if sig == signature and other != knobs]
            if same and pid not in self.vindicated:
                repeated.append(pid)
                earlier.update(same)
            seen.append((signature, knobs, record.trial_no))
        if not repeated:
            return None
        return (Candidate(knobs=knobs, patches=tuple(repeated)),
                f"trial {record.trial_no} crashed with the error of trial(s) {', '.join(map(str, sorted(earlier)))} "
                f"under other knob settings: {record.reason}")

    def excludes(self, candidate: Candidate) -> str | None:
        """Why ``candidate`` may not be tried or verified (None: it may)."""
        for pid in candidate.patches:
            if pid in self.patches:
                return f"patch {pid} was judged invalid: {self.patches[pid]}"
        return self.candidates.get(candidate.digest())

    @property
    def excluded_sets(self) -> list[frozenset[str]]:
        """For :class:`~infrarsi.search.space.SearchSpace`: every blamed patch as a set of one."""
        return [frozenset({pid}) for pid in sorted(self.patches)]
