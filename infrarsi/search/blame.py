"""What was judged stays judged: patches found invalid are not tried or verified again.

A candidate judged ``invalid`` (a verification verdict, or a search trial whose
invariants broke) is blamed on its patches that nothing has vindicated: a patch
is vindicated by a valid verdict, or by a trial whose loss stayed inside the
baseline's band. A blamed patch is excluded from every later candidate and from
the remaining verification slots; when every patch of the candidate is
vindicated (or it has none) the knobs are to blame and only that candidate is
excluded. The record keeps why, so the report and the next proposal round can
say it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from infrarsi.trial_record import Candidate


@dataclass(kw_only=True)
class Judgements:
    """Patches and candidates judged invalid in one run, with the reason of each."""

    patches: dict[str, str] = field(default_factory=dict)  # patch id → why it is invalid
    candidates: dict[str, str] = field(default_factory=dict)  # candidate digest → why (no patch to blame)
    vindicated: set[str] = field(default_factory=set)  # patches seen valid

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
