"""The joint search space: launch-knob assignments times sets of code patches.

A point is a :class:`~infrarsi.trial_record.Candidate` that names every knob of the
space (the bot passes every knob explicitly, so a candidate that leaves one out
would be a different launch than it looks) plus a set of patch ids closed under
``requires`` in which no two settings conflict (:mod:`infrarsi.conflicts`: two
patches that decide or change the same thing, or that a record says conflict; a
patch and a knob away from its default that decide the same thing).

Each knob becomes an *axis*: the finite list of levels the search proposes and
the way a value turns into features. Features are relative to the baseline
(every knob at its default, no patches), so the baseline encodes to the origin
and every coefficient of the models reads as "what this change does to the
baseline". Numeric knobs whose values are powers of two (micro-batch, threads
1..64) or that the contract marks ``log`` are encoded as ``log2(value/default)``
because their effects on time and memory are multiplicative per doubling;
other numeric ranges are linear in units of the whole range; categorical
values, and numeric value lists that are neither, are one-hot with the
default level dropped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from infrarsi.contract.model import Constraint, Knob, KnobValue
from infrarsi.conflicts import at_default, conflicts, held_knobs
from infrarsi.search.derived import DerivedFeature
from infrarsi.patches import PatchSpec
from infrarsi.trial_record import Candidate

#: Levels proposed for a continuous knob without ``values``: enough to see a
#: curve, few enough that enumeration and one-change moves stay cheap.
GRID_POINTS: int = 8

#: An int range at most this wide is searched at every integer.
INT_FULL_RANGE: int = 16

#: Encodings memoised per space before the memo is cleared.
ENCODE_CACHE: int = 200_000

Encoding = Literal["onehot", "log2", "linear"]


def _same(a: KnobValue, b: KnobValue) -> bool:
    """Equality that keeps ``True`` and ``1`` apart, as :class:`Knob` does."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _is_pow2(v: KnobValue) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        return False
    exp = math.log2(float(v))
    return abs(exp - round(exp)) < 1e-9


def _native(v: float, kind: str) -> KnobValue:
    """A numpy scalar as the plain Python value a digest and a command line expect."""
    return int(round(float(v))) if kind == "int" else float(v)


@dataclass(frozen=True, kw_only=True, slots=True)
class KnobAxis:
    """How the search sees one knob: the levels it proposes and how a value becomes features."""

    knob: Knob
    levels: tuple[KnobValue, ...]
    encoding: Encoding
    scale: float = 1.0  # linear encoding: the width of the range

    @property
    def name(self) -> str:
        return self.knob.name

    def feature_names(self) -> tuple[str, ...]:
        if self.encoding == "onehot":
            return tuple(self.knob.codec.feature(v) for v in self.levels if not _same(v, self.knob.default))
        return (self.name,)

    def features(self, value: KnobValue) -> list[float]:
        if self.encoding == "onehot":
            return [1.0 if _same(value, v) else 0.0 for v in self.levels if not _same(v, self.knob.default)]
        if self.encoding == "log2":
            return [math.log2(float(value)) - math.log2(float(self.knob.default))]
        return [(float(value) - float(self.knob.default)) / self.scale]

    def embedding(self, value: KnobValue) -> list[float]:
        """Coordinates whose Euclidean distance is this knob's share of :meth:`SearchSpace.distance`.

        One-hot over *all* levels scaled by 1/sqrt(2), so any two different levels
        are exactly 1 apart; numeric knobs scaled so the extreme levels are 1 apart.
        """
        if self.encoding == "onehot":
            return [(1.0 if _same(value, v) else 0.0) / math.sqrt(2.0) for v in self.levels]
        spread = [self.features(v)[0] for v in self.levels]
        span = (max(spread) - min(spread)) or 1.0
        return [self.features(value)[0] / span]

    @staticmethod
    def of(knob: Knob) -> KnobAxis:
        """Choose levels and encoding for ``knob`` (see the module docstring for why)."""
        if knob.kind == "bool":
            return KnobAxis(knob=knob, levels=(False, True), encoding="onehot")
        if knob.kind == "categorical" or knob.values is not None:
            assert knob.values is not None
            levels = tuple(knob.values)
            numeric = knob.kind in ("int", "float") and all(
                not isinstance(v, bool) and isinstance(v, int | float) and v > 0 for v in levels)
            if numeric and (knob.log or all(_is_pow2(v) for v in levels)) and len(levels) > 1:
                return KnobAxis(knob=knob, levels=tuple(sorted(levels, key=float)), encoding="log2")
            return KnobAxis(knob=knob, levels=levels, encoding="onehot")
        assert knob.low is not None and knob.high is not None
        low, high = float(knob.low), float(knob.high)
        use_log = knob.log and low > 0
        if knob.kind == "int" and high - low + 1 <= INT_FULL_RANGE:
            grid = np.arange(int(math.ceil(low)), int(math.floor(high)) + 1, dtype=float)
        elif use_log:
            grid = np.geomspace(low, high, GRID_POINTS)
        else:
            grid = np.linspace(low, high, GRID_POINTS)
        values = {_native(v, knob.kind) for v in grid} | {knob.default}
        levels = tuple(sorted((v for v in values if knob.contains(v)), key=float))
        if use_log:
            return KnobAxis(knob=knob, levels=levels, encoding="log2")
        return KnobAxis(knob=knob, levels=levels, encoding="linear", scale=(high - low) or 1.0)


class SearchSpace:
    """Knob axes, constraints and patches; validity, sampling, encoding and moves.

    Built once per run from the contract and the applicable patches; immutable
    after construction, so models and proposals can hold it without copying.
    """

    def __init__(self, axes: Sequence[KnobAxis], constraints: Sequence[Constraint],
                 patches: Sequence[PatchSpec], excluded: Iterable[Iterable[str]] = (),
                 derived: Sequence[DerivedFeature] = ()) -> None:
        self.axes: tuple[KnobAxis, ...] = tuple(axes)
        #: Columns computed from several knobs (:mod:`.derived`), after the patches in :meth:`encode`.
        self.derived: tuple[DerivedFeature, ...] = tuple(derived)
        self.constraints: tuple[Constraint, ...] = tuple(constraints)
        self.patches: dict[str, PatchSpec] = {p.id: p for p in patches}
        self.patch_ids: tuple[str, ...] = tuple(sorted(self.patches))
        self._axis = {a.name: a for a in self.axes}
        names: list[str] = []
        groups: list[str] = []
        kinds: list[str] = []
        for a in self.axes:
            for n in a.feature_names():
                names.append(n)
                groups.append(a.name)
                kinds.append(a.encoding)
        for pid in self.patch_ids:
            names.append(f"patch:{pid}")
            groups.append(f"patch:{pid}")
            kinds.append("patch")
        for d in self.derived:
            names.append(d.name)
            groups.append(f"derived:{d.name}")
            kinds.append("derived")
        #: Main-effect feature names, in :meth:`encode` order.
        self.feature_names: tuple[str, ...] = tuple(names)
        #: For each feature, the knob name or ``patch:<id>`` it belongs to.
        self.feature_groups: tuple[str, ...] = tuple(groups)
        #: For each feature, ``onehot``, ``log2``, ``linear``, ``patch`` or ``derived``.
        self.feature_kinds: tuple[str, ...] = tuple(kinds)
        #: For each feature, the largest ``|value|`` it takes over the levels (1 for 0/1 features).
        self.feature_spans: tuple[float, ...] = tuple(
            max((abs(a.features(v)[0]) for a in self.axes if a.name == g for v in a.levels), default=1.0) or 1.0
            if k in ("log2", "linear") else 1.0 for g, k in zip(groups, kinds))
        # Encodings are pure functions of the (frozen, hashable) candidate; scoring
        # re-encodes the same pool every batch.
        self._encoded: dict[Candidate, np.ndarray] = {}
        defaults = {a.name: a.knob.default for a in self.axes}
        self._derived_origin: tuple[float, ...] = tuple(d.value(defaults) for d in self.derived)
        # Validity is checked for every sampled and neighbouring point (tens of thousands per
        # proposal): constraints compiled to tuples, domain membership memoised per value.
        self._forbid: tuple[tuple[tuple[str, KnobValue], ...], ...] = tuple(
            c.when for c in self.constraints if c.kind == "forbid")
        self._other_constraints: tuple[Constraint, ...] = tuple(c for c in self.constraints if c.kind != "forbid")
        self._in_domain: dict[tuple[str, type, KnobValue], bool] = {}
        #: Patch sets judged invalid (verification, invariants): no point holds all of one. A patch's
        #: feature stays (its trials still inform the models); it is only never proposed again.
        self.excluded: tuple[frozenset[str], ...] = tuple(frozenset(e) for e in excluded if e)
        # The one conflict rule (infrarsi.conflicts): which patches never share a point, and which knobs a
        # patch holds at their defaults (those deciding what it decides).
        found = conflicts(self.patches.values())
        self._conflicts: dict[str, set[str]] = {pid: set(found.get(pid, ())) for pid in self.patch_ids}
        self._decided: dict[str, tuple[tuple[str, KnobValue], ...]] = held_knobs(
            (ax.knob for ax in self.axes), self.patches.values())

    @staticmethod
    def from_contract(contract_knobs: Sequence[Knob], constraints: Sequence[Constraint],
                      patches: Sequence[PatchSpec], excluded: Iterable[Iterable[str]] = (),
                      derived: Sequence[DerivedFeature] = ()) -> SearchSpace:
        return SearchSpace([KnobAxis.of(k) for k in contract_knobs], constraints, patches, excluded, derived)

    # -- points -----------------------------------------------------------------

    def baseline(self) -> Candidate:
        """Every knob at its default, no patches: the origin of the encoding."""
        return Candidate.of({a.name: a.knob.default for a in self.axes}, ())

    def complete(self, candidate: Candidate) -> Candidate:
        """``candidate`` with every knob it leaves out set to its default."""
        values = {a.name: a.knob.default for a in self.axes}
        values.update(candidate.knob_dict())
        return Candidate.of(values, candidate.patches)

    def project(self, candidate: Candidate) -> Candidate | None:
        """A candidate from elsewhere (the experience bank) as a point of this space, or None.

        Knobs and patches this space does not have are dropped (the rest of a
        transferred configuration still carries the knowledge); missing knobs
        take their defaults; a value outside a domain or a broken constraint
        makes it unusable here.
        """
        values = {k: v for k, v in candidate.knob_dict().items() if k in self._axis}
        patches = self._closed({p for p in candidate.patches if p in self.patches})
        point = self.complete(Candidate.of(values, sorted(patches)))
        return point if self.contains(point) else None

    def violations(self, candidate: Candidate) -> list[str]:
        """Why ``candidate`` is not a point of this space (empty when it is)."""
        out: list[str] = []
        values = candidate.knob_dict()
        for name in sorted(set(values) - set(self._axis)):
            out.append(f"unknown knob {name}")
        for a in self.axes:
            if a.name not in values:
                out.append(f"knob {a.name} missing")
            elif not a.knob.contains(values[a.name]):
                out.append(f"knob {a.name}: {values[a.name]!r} is not {a.knob.domain_text()}")
        for c in self.constraints:
            if not c.allows(values):
                out.append(c.describe())
        chosen = set(candidate.patches)
        for pid in candidate.patches:
            spec = self.patches.get(pid)
            if spec is None:
                out.append(f"unknown patch {pid}")
                continue
            out += [f"{pid} requires {r}" for r in spec.requires if r not in chosen]
            out += [f"{pid} conflicts with {c}" for c in sorted(self._conflicts[pid] & chosen) if c > pid]
            out += [f"{pid} and knob {k}={values.get(k)!r} decide the same thing" for k, d in
                    self._decided.get(pid, ()) if not at_default(values.get(k, d), d)]
        out += [f"holds {', '.join(sorted(e))}, judged invalid" for e in self.excluded if e <= chosen]
        return out

    def contains(self, candidate: Candidate) -> bool:
        """``not self.violations(candidate)``, without building the messages."""
        values = candidate.knob_dict()
        if len(values) != len(self.axes):
            return False
        for a in self.axes:
            if a.name not in values:
                return False
            v = values[a.name]
            memo = (a.name, type(v), v)
            ok = self._in_domain.get(memo)
            if ok is None:
                ok = self._in_domain[memo] = a.knob.contains(v)
            if not ok:
                return False
        return self._allows(values) and self._patches_ok(candidate.patches) \
            and all(self._fits(pid, values) for pid in candidate.patches)

    def _allows(self, values: dict[str, KnobValue]) -> bool:
        """Every constraint holds (``Constraint.allows``, forbids unrolled)."""
        for when in self._forbid:
            for k, v in when:
                if values.get(k) != v:
                    break
            else:
                return False
        return all(c.allows(values) for c in self._other_constraints)

    def _patches_ok(self, patches: Sequence[str]) -> bool:
        chosen = set(patches)
        for pid in patches:
            spec = self.patches.get(pid)
            if spec is None or any(r not in chosen for r in spec.requires) or self._conflicts[pid] & chosen:
                return False
        return not any(e <= chosen for e in self.excluded)

    def conflicting(self, a: str, b: str) -> bool:
        """Whether patches ``a`` and ``b`` never share a point (:mod:`infrarsi.conflicts`)."""
        return b in self._conflicts.get(a, ())

    def _fits(self, pid: str, values: dict[str, KnobValue]) -> bool:
        """Every knob that decides what patch ``pid`` decides is at its default in ``values``."""
        return all(at_default(values.get(k, d), d) for k, d in self._decided.get(pid, ()))

    valid = contains

    # -- patch sets ---------------------------------------------------------------

    def _with_patch(self, patches: Iterable[str], pid: str) -> frozenset[str] | None:
        """Add ``pid`` and, transitively, what it requires; drop what conflicts; None if impossible."""
        added: set[str] = set()
        todo = [pid]
        while todo:
            p = todo.pop()
            if p in added:
                continue
            if p not in self.patches:
                return None
            added.add(p)
            todo += self.patches[p].requires
        if any(self._conflicts[a] & added for a in added):
            return None
        kept = {p for p in patches if not (self._conflicts[p] & added)}
        return self._closed(kept | added)

    def _without_patch(self, patches: Iterable[str], pid: str) -> frozenset[str]:
        return self._closed(set(patches) - {pid})

    def _closed(self, patches: set[str]) -> frozenset[str]:
        """Drop every patch whose requirements are not all present (repeatedly)."""
        kept = set(patches)
        changed = True
        while changed:
            changed = False
            for p in sorted(kept):
                if not all(r in kept for r in self.patches[p].requires):
                    kept.discard(p)
                    changed = True
        return frozenset(kept)

    # -- sampling, moves, enumeration -----------------------------------------

    def sample(self, rng: np.random.Generator, n: int, *, max_attempts: int | None = None) -> list[Candidate]:
        """Up to ``n`` distinct valid points, drawn at random.

        Knob levels are uniform; each draw first picks a patch density u ~ U(0,1)
        and includes each patch with probability u, so both sparse and dense
        patch sets appear (a fixed 1/2 would almost never propose "few patches"
        when there are a dozen). Conflicts are resolved by keeping patches in a
        random order; unmet requirements drop the dependent patch.
        """
        out: dict[Candidate, Candidate] = {}
        attempts = max_attempts if max_attempts is not None else 50 * n + 100
        sizes = np.array([len(a.levels) for a in self.axes], dtype=np.int64)
        n_patches = len(self.patch_ids)
        # Drawn in blocks (one numpy call per quantity, not per knob and patch): the
        # pool needs about a thousand valid points per proposal, and constraints may
        # reject most draws.
        while attempts > 0 and len(out) < n:
            block = min(attempts, max(64, 2 * (n - len(out))))
            attempts -= block
            levels = rng.integers(0, sizes, size=(block, len(sizes))) if len(sizes) else np.zeros((block, 0), int)
            density = rng.random(block)
            order = np.argsort(rng.random((block, n_patches)), axis=1)
            coins = rng.random((block, n_patches))
            for i in range(block):
                values = {a.name: a.levels[int(j)] for a, j in zip(self.axes, levels[i])}
                if not self._allows(values):  # levels are in their domains, the patch set is closed
                    continue
                chosen: set[str] = set()
                for k in order[i]:
                    pid = self.patch_ids[int(k)]
                    if coins[i, k] < density[i] and not (self._conflicts[pid] & chosen) and self._fits(pid, values):
                        chosen.add(pid)
                closed = self._closed(chosen)
                if any(e <= closed for e in self.excluded):
                    continue
                cand = Candidate.of(values, sorted(closed))
                out.setdefault(cand, cand)
                if len(out) >= n:
                    break
        return list(out.values())

    def neighbors(self, candidate: Candidate) -> list[Candidate]:
        """Valid points one change away: one knob to another level, or one patch toggled.

        Numeric (ordered) knobs move to the adjacent levels only; one-hot knobs to
        any other level. Adding a patch brings its requirements and evicts what
        conflicts with it (a swap is one move); removing one removes its dependents.
        """
        values = candidate.knob_dict()
        out: dict[str, Candidate] = {}
        for a in self.axes:
            current = values.get(a.name, a.knob.default)
            if a.encoding == "onehot":
                targets = [v for v in a.levels if not _same(v, current)]
            else:
                below = [v for v in a.levels if float(v) < float(current)]
                above = [v for v in a.levels if float(v) > float(current)]
                targets = ([max(below, key=float)] if below else []) + ([min(above, key=float)] if above else [])
            for v in targets:
                c = Candidate.of({**values, a.name: v}, candidate.patches)
                out.setdefault(c.digest(), c)
        for pid in self.patch_ids:
            if pid in candidate.patches:
                new: frozenset[str] | None = self._without_patch(candidate.patches, pid)
            else:
                new = self._with_patch(candidate.patches, pid)
            if new is not None:
                c = Candidate.of(values, sorted(new))
                out.setdefault(c.digest(), c)
        own = candidate.digest()
        return [c for d, c in out.items() if d != own and self.contains(c)]

    def patch_sets(self, limit: int) -> list[frozenset[str]] | None:
        """Every valid patch set, or None when there are more than ``limit``."""
        sets: list[frozenset[str]] = []

        def walk(i: int, chosen: frozenset[str]) -> bool:
            if i == len(self.patch_ids):
                if self._closed(set(chosen)) == chosen and not any(e <= chosen for e in self.excluded):
                    sets.append(chosen)
                return len(sets) <= limit
            pid = self.patch_ids[i]
            if not walk(i + 1, chosen):
                return False
            if not (self._conflicts[pid] & chosen):
                return walk(i + 1, chosen | {pid})
            return True

        return sets if walk(0, frozenset()) else None

    def enumerate(self, limit: int = 4096) -> list[Candidate] | None:
        """Every valid point when there are at most ``limit`` of them, else None."""
        combos = math.prod(len(a.levels) for a in self.axes)
        if combos > limit:
            return None
        sets = self.patch_sets(limit)
        if sets is None or combos * len(sets) > limit:
            return None
        out: list[Candidate] = []
        names = [a.name for a in self.axes]
        for levels in itertools.product(*(a.levels for a in self.axes)):
            values = dict(zip(names, levels))
            if not all(c.allows(values) for c in self.constraints):
                continue
            out += [Candidate.of(values, sorted(s)) for s in sets if all(self._fits(p, values) for p in s)]
        return out

    # -- features and distance ------------------------------------------------

    def encode(self, candidate: Candidate) -> np.ndarray:
        """Main-effect features of ``candidate``; the baseline is all zeros."""
        cached = self._encoded.get(candidate)
        if cached is not None:
            return cached.copy()
        if len(self._encoded) >= ENCODE_CACHE:
            self._encoded.clear()
        values = candidate.knob_dict()
        row: list[float] = []
        for a in self.axes:
            row += a.features(values.get(a.name, a.knob.default))
        chosen = set(candidate.patches)
        row += [1.0 if pid in chosen else 0.0 for pid in self.patch_ids]
        if self.derived:
            full = {a.name: values.get(a.name, a.knob.default) for a in self.axes}
            row += [d.value(full) - self._derived_origin[i] for i, d in enumerate(self.derived)]
        out = np.asarray(row, dtype=float)
        self._encoded[candidate] = out
        return out.copy()

    def encode_many(self, candidates: Sequence[Candidate]) -> np.ndarray:
        if not candidates:
            return np.zeros((0, len(self.feature_names)))
        return np.vstack([self.encode(c) for c in candidates])

    def embed(self, candidate: Candidate) -> np.ndarray:
        """Coordinates for :meth:`distance`: each knob and each patch contributes at most 1."""
        values = candidate.knob_dict()
        row: list[float] = []
        for a in self.axes:
            row += a.embedding(values.get(a.name, a.knob.default))
        chosen = set(candidate.patches)
        row += [1.0 if pid in chosen else 0.0 for pid in self.patch_ids]
        return np.asarray(row, dtype=float)

    def distance(self, a: Candidate, b: Candidate) -> float:
        """Euclidean distance where a changed knob level or a toggled patch counts 1
        (an ordered knob: its share of its own range), for maximin spreading."""
        return float(np.linalg.norm(self.embed(a) - self.embed(b)))
