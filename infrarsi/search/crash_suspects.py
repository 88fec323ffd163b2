"""What a failed trial can be blamed on: one setting or one pair of settings that never ran elsewhere.

A framework refuses a setting or a combination, deterministically: 28 layers do not
split into 2 pipeline stages of 4 virtual stages each, 8 experts do not spread over
3 ranks, a fused kernel is missing for one dtype. The logistic crash model
(:mod:`.feasibility`) spreads each failure over every feature of the failed
configuration with one prior each; with dozens of features (the pairs among them)
the blame on the one setting that failed every time stays small. On the cluster
simulator (deepseek-moe-16b, two A100 nodes) three crashes in three trials with
``vpp=4`` left the next ``vpp=4`` candidate at P(runs) 0.91, and five of twenty
trials crashed on that one rule.

So, as in combinatorial testing's fault localisation: a configuration is a set of
*factors* (every knob's value, defaults included, and every patch applied), and its
*interactions* are its single factors and its pairs of factors. An interaction
present in a trial that ran (``ok``, ``oom``) is cleared: it does not fail by itself.
A failed trial's *suspects* are its interactions not cleared. Its cause is one of
them: a single setting or a pair, half the prior mass each (evenly within each,
all of it on one kind when the other has no suspect left). A candidate carries,
for each failure, the mass of that failure's suspects it contains, at most
``MAX_BLAME`` (a failure can be a one-off: a node lost, a flaky collective); failures
combine as independent causes. A failure with no suspect left (each of its settings
and pairs ran elsewhere) is no one- or two-setting rule (a flake, or three settings
together) and is left to the logistic model.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from infrarsi.trial_record import Candidate

#: The most one failure says about a candidate holding all of its suspects (one-off failures exist).
MAX_BLAME = 0.9
#: Prior mass of "one setting" among a failure's causes; the rest is "a pair of settings".
SINGLE_SHARE = 0.5

Factor = tuple[str, Hashable]
Interaction = tuple[Factor, ...]


def factors(candidate: Candidate, *, ordered: bool = True) -> list[Factor]:
    """Every knob's value (the candidate is complete: defaults are named) and every patch applied; in one
    order (``ordered``) so that a pair is always named the same way."""
    out = [(f"knob:{k}", v) for k, v in candidate.knobs] + [(f"patch:{p}", True) for p in candidate.patches]
    return sorted(out, key=repr) if ordered else out


def interactions(candidate: Candidate) -> Iterable[Interaction]:
    fs = factors(candidate)
    yield from ((f,) for f in fs)
    yield from itertools.combinations(fs, 2)


@dataclass(frozen=True, slots=True)
class CrashSuspects:
    """The suspects of every failure that still has some, as blame per failure (columns)."""

    #: suspect factor -> row of ``single`` and of ``pair``'s two factor axes
    vocabulary: dict[Factor, int]
    #: (factors, failures): the blame a single factor carries for each failure
    single: np.ndarray
    #: (failures, factors, factors), symmetric: half a pair's blame on each side
    pair: np.ndarray

    @property
    def n_failures(self) -> int:
        return self.single.shape[1]

    @staticmethod
    def fit(ran: Sequence[Candidate], failed: Sequence[Candidate]) -> CrashSuspects:
        cleared: set[Interaction] = set()
        for c in ran:
            cleared.update(interactions(c))
        blames: list[dict[Interaction, float]] = []
        for c in failed:
            suspects = [i for i in interactions(c) if i not in cleared]
            if not suspects:
                continue
            singles = [i for i in suspects if len(i) == 1]
            pairs = [i for i in suspects if len(i) == 2]
            single_mass = SINGLE_SHARE if singles and pairs else 1.0 if singles else 0.0
            blame = {i: single_mass / len(singles) for i in singles}
            blame.update({i: (1.0 - single_mass) / len(pairs) for i in pairs})
            blames.append(blame)
        vocabulary: dict[Factor, int] = {}
        for blame in blames:
            for i in blame:
                for f in i:
                    vocabulary.setdefault(f, len(vocabulary))
        n, k = len(vocabulary), len(blames)
        single, pair = np.zeros((n, k)), np.zeros((k, n, n))
        for col, blame in enumerate(blames):
            for i, b in blame.items():
                if len(i) == 1:
                    single[vocabulary[i[0]], col] = b
                else:
                    a, z = vocabulary[i[0]], vocabulary[i[1]]
                    pair[col, a, z] = pair[col, z, a] = b / 2
        return CrashSuspects(vocabulary=vocabulary, single=single, pair=pair)

    def prob_fail(self, candidates: Sequence[Candidate]) -> np.ndarray:
        """P(a candidate holds the cause of some failure), failures independent."""
        if not self.n_failures or not candidates:
            return np.zeros(len(candidates))
        held = np.zeros((len(candidates), len(self.vocabulary)))
        for j, c in enumerate(candidates):
            for f in factors(c, ordered=False):
                i = self.vocabulary.get(f)
                if i is not None:
                    held[j, i] = 1.0
        n, k = self.pair.shape[1], self.n_failures
        pairs = (held @ self.pair.transpose(1, 0, 2).reshape(n, k * n)).reshape(len(candidates), k, n)
        share = held @ self.single + (pairs * held[:, None, :]).sum(axis=2)
        return 1.0 - np.prod(1.0 - MAX_BLAME * np.minimum(share, 1.0), axis=1)

    def summary(self, limit: int = 5) -> tuple[SuspectRow, ...]:
        """The suspects carrying the most blame, summed over failures: what a reader of the run wants to
        know about its failures (``vpp=4``: 2.0 of 3 failures)."""
        names = {i: f for f, i in self.vocabulary.items()}
        rows = [SuspectRow(setting=describe((names[a],)), failures=int(np.count_nonzero(self.single[a])),
                           blame=float(self.single[a].sum())) for a in range(len(names)) if self.single[a].any()]
        for a in range(len(names)):
            for z in range(a + 1, len(names)):
                shares = 2 * self.pair[:, a, z]
                if shares.any():
                    rows.append(SuspectRow(setting=describe((names[a], names[z])),
                                           failures=int(np.count_nonzero(shares)), blame=float(shares.sum())))
        rows.sort(key=lambda r: (-r.blame, r.setting))
        return tuple(rows[:limit])


@dataclass(frozen=True, kw_only=True, slots=True)
class SuspectRow:
    setting: str  # ``vpp=4``, ``pp=2 + vpp=4``, ``+fused_adamw``
    failures: int  # failed trials it is a suspect of
    blame: float  # its share of them, summed (at most ``failures``)


def describe(interaction: Interaction) -> str:
    def one(f: Factor) -> str:
        kind, _, name = f[0].partition(":")
        return f"+{name}" if kind == "patch" else f"{name}={f[1]}"
    return " + ".join(one(f) for f in interaction)
