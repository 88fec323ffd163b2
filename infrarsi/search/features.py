"""Model features (main effects, curvature, pairwise interactions) and their priors.

Every model of the search regresses on the same design: the space's main
features, a square term for each ordered knob with three or more levels (step
time against micro-batch is a curve, not a line, in log-log), and products of
pairs of main features (torch.compile and bf16 do not simply add up). Pairs
that can never both be non-zero are left out: two levels of one knob, two
conflicting patches (:mod:`infrarsi.conflicts`); so is a patch paired with one it requires (the product
equals the patch's own feature). With more than ``ALL_PAIRS_MAX`` main features
only pairs among the ``ALL_PAIRS_MAX`` with the largest prior effects are kept,
so parameters grow linearly, not quadratically, with the number of patches:
the strong effects are the ones whose interactions are large enough to matter.

Priors are Gaussian per coefficient. A patch's main effect takes its
:class:`~infrarsi.patches.Effect` (``log(time_ratio)``, ``time_sigma``; likewise
for memory); knob features take what the caller's :class:`Priors` says, by
feature name, else mean 0 and a default spread; curvature and interactions are
centred on 0 with a small spread ("probably additive, unless the data insist"),
stated for the term's largest value: a square or product involving a log2 knob
that spans four doublings has its sd divided by that span (squared for a
square), so an interaction cannot swing an extreme configuration by more than
the intended amount a priori.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import numpy as np

from infrarsi.search.space import SearchSpace

#: Up to this many main features, every eligible pair gets an interaction term.
ALL_PAIRS_MAX: int = 12

#: Smallest prior sd on any coefficient: an Effect with sigma 0 would otherwise
#: be a certainty no measurement could move.
MIN_PRIOR_SD: float = 0.01

INTERCEPT = "(intercept)"

#: The two parts of the two-part memory model (:mod:`.memory_parts`), model states first.
MEMORY_PART_NAMES: tuple[str, str] = ("states", "activations")

Target = Literal["time", "memory", "crash"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Priors:
    """Gaussian priors on model coefficients, by feature name (:attr:`SearchSpace.feature_names`).

    Units: log of the ratio to the baseline, per unit of the feature. A one-hot
    or bool feature ``knob=value`` and a patch ``patch:<id>`` are 0/1, so the
    mean is ``log(ratio)``; a log2-encoded knob (``micro_batch``) is per
    doubling; a linear knob per its whole range. ``time`` and ``memory`` map a
    name to ``(mean, sd)``; an entry for ``patch:<id>`` overrides the patch's
    own Effect. Intercepts are ``(mean, sd)`` of log seconds and log bytes; None
    means broad (time) or anchored on the memory limit (memory). Noise priors are
    ``(scale, dof)`` of a scaled inverse-chi-square prior on the residual
    variance: "as if ``dof`` earlier observations had shown residuals of sd
    ``scale``" (see :func:`noise_log_prior`). ``memory_parts`` says which part of
    the peak a feature acts on, ``"states"`` (parameters, gradients, optimizer
    state) or ``"activations"``; when it names any feature of the space, peak
    memory is fitted as the sum of the two parts (:mod:`.memory_parts`), else as
    one log-linear model (:mod:`.memory_model`). ``time_parts`` likewise says
    which part of the step a feature acts on, ``"compute"`` or
    ``"communication"`` (exposed); when it names any feature, step time is
    fitted as their sum (:mod:`.time_parts`), else as one log-linear model.
    ``memory_by_part`` gives a design column's prior on one part of the two-part
    memory model, keyed ``"<column> [<part>]"`` (``"tp [states]"``,
    ``"tp*zero=0 [states]"``; a pair in either order), in that part's own units
    and used as given: a feature can shrink one part and leave the other (tensor
    parallelism under ZeRO-3 divides the activations, not the already sharded
    states), which one total-peak prior cannot say.
    """

    time: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    memory: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    knob_time_sd: float = 0.2
    knob_memory_sd: float = 0.3
    square_sd: float = 0.1
    interaction_sd: float = 0.1
    crash_sd: float = 1.5
    crash_interaction_sd: float = 1.5
    crash_base_rate: float = 0.1
    time_intercept: tuple[float, float] | None = None
    memory_intercept: tuple[float, float] | None = None
    time_noise: tuple[float, float] = (0.05, 2.0)
    memory_noise: tuple[float, float] = (0.03, 4.0)
    memory_parts: Mapping[str, str] = field(default_factory=dict)
    time_parts: Mapping[str, str] = field(default_factory=dict)
    memory_by_part: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "time", MappingProxyType(dict(self.time)))
        object.__setattr__(self, "memory", MappingProxyType(dict(self.memory)))
        object.__setattr__(self, "memory_parts", MappingProxyType(dict(self.memory_parts)))
        object.__setattr__(self, "time_parts", MappingProxyType(dict(self.time_parts)))
        object.__setattr__(self, "memory_by_part", MappingProxyType(dict(self.memory_by_part)))

    def unknown_names(self, space: SearchSpace) -> list[str]:
        """Names in ``time``/``memory`` that are not features of ``space`` (likely typos)."""
        known = set(space.feature_names)
        named = set(self.time) | set(self.memory) | set(self.memory_parts) | set(self.time_parts)
        return sorted((named - known) | {key for key in self.memory_by_part if not _names_column(key, known)})


def part_key(key: str) -> tuple[str, str]:
    """``"tp*zero=0 [states]"`` as ``("tp*zero=0", "states")``; a key without a part names no part (``""``)."""
    column, sep, rest = key.rpartition(" [")
    if not sep or not rest.endswith("]"):
        return key, ""
    return column, rest[:-1]


def _names_column(key: str, known: set[str]) -> bool:
    column, part = part_key(key)
    return part in MEMORY_PART_NAMES and {f.removesuffix("^2") for f in column.split("*")} <= known


def part_prior_lookup(given: Mapping[str, tuple[float, float]], column: str, part: str) -> tuple[float, float] | None:
    """The prior ``given`` states for design ``column`` on ``part``; a pair matches in either order."""
    hit = given.get(f"{column} [{part}]")
    if hit is None and "*" in column:
        a, _, b = column.partition("*")
        hit = given.get(f"{b}*{a} [{part}]")
    return hit


@dataclass(frozen=True, kw_only=True, slots=True)
class EffectRow:
    """One coefficient, before and after the data: what a report shows as prior vs posterior."""

    feature: str
    prior_mean: float
    prior_sd: float
    post_mean: float
    post_sd: float

    @property
    def ratio(self) -> float:
        """The posterior multiplicative effect, ``exp(post_mean)``."""
        return math.exp(self.post_mean)


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureMap:
    """Main features, squares and pairs: the columns of every model's design matrix."""

    main_names: tuple[str, ...]
    squares: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]

    @property
    def names(self) -> tuple[str, ...]:
        m = self.main_names
        return m + tuple(f"{m[i]}^2" for i in self.squares) + tuple(f"{m[i]}*{m[j]}" for i, j in self.pairs)

    @property
    def n_main(self) -> int:
        return len(self.main_names)

    def expand(self, z: np.ndarray) -> np.ndarray:
        """Design rows (without intercept) from main-feature rows ``z`` of shape (n, n_main)."""
        z = np.atleast_2d(np.asarray(z, dtype=float))
        parts = [z]
        if self.squares:
            parts.append(z[:, list(self.squares)] ** 2)
        if self.pairs:
            i = [p[0] for p in self.pairs]
            j = [p[1] for p in self.pairs]
            parts.append(z[:, i] * z[:, j])
        return np.hstack(parts)

    def main_prior(self, space: SearchSpace, priors: Priors, target: Target) -> tuple[np.ndarray, np.ndarray]:
        """Prior mean and sd of each main-effect coefficient for ``target``."""
        means, sds = [], []
        for name in self.main_names:
            m, s = _main_prior(space, priors, name, target)
            means.append(m)
            sds.append(max(s, MIN_PRIOR_SD))
        return np.asarray(means), np.asarray(sds)

    def prior(self, space: SearchSpace, priors: Priors, target: Target) -> tuple[np.ndarray, np.ndarray]:
        """Prior mean and sd of every coefficient (main, squares, pairs; no intercept)."""
        m, s = self.main_prior(space, priors, target)
        n_extra = len(self.squares) + len(self.pairs)
        span = np.asarray(space.feature_spans)
        square_sd = priors.crash_interaction_sd if target == "crash" else priors.square_sd
        pair_sd = priors.crash_interaction_sd if target == "crash" else priors.interaction_sd
        # Per unit of the largest product a term can take: a log2 knob spans several
        # doublings, and "sd 0.1" should bound the term where it is largest, not per doubling squared.
        extra_sd = np.concatenate([square_sd / span[list(self.squares)] ** 2,
                                   np.asarray([pair_sd / (span[i] * span[j]) for i, j in self.pairs])])
        return np.concatenate([m, np.zeros(n_extra)]), np.concatenate([s, np.maximum(extra_sd, MIN_PRIOR_SD)])


def noise_log_prior(tau: float, scale: float, dof: float) -> tuple[float, float, float]:
    """Log density of ``tau = log sigma`` under ``sigma^2 ~ scaled-Inv-chi2(dof, scale^2)``,
    with its first and second derivatives in ``tau``.

    Why this family: as ``sigma -> 0`` its ``-dof scale^2 / (2 sigma^2)`` term
    falls faster than any likelihood can rise (``-n log sigma``), so a model with
    nearly as many coefficients as trials cannot explain the data exactly and
    declare itself certain; a log-normal prior on sigma does not prevent that.
    ``log p(tau) = -dof tau - dof scale^2 exp(-2 tau) / 2 + const``.
    """
    k = dof * scale * scale * math.exp(-2.0 * tau)
    return -dof * tau - 0.5 * k, -dof + k, -2.0 * k


def _main_prior(space: SearchSpace, priors: Priors, name: str, target: Target) -> tuple[float, float]:
    if target == "crash":
        return 0.0, priors.crash_sd
    given = priors.time if target == "time" else priors.memory
    if name in given:
        mean, sd = given[name]
        return float(mean), float(sd)
    if name.startswith("patch:") and name[6:] in space.patches:
        eff = space.patches[name[6:]].effect
        return (eff.log_time, eff.time_sigma) if target == "time" else (eff.log_mem, eff.mem_sigma)
    return 0.0, priors.knob_time_sd if target == "time" else priors.knob_memory_sd


def build_features(space: SearchSpace, priors: Priors) -> FeatureMap:
    """The design for ``space``: main effects, squares of ordered knobs, eligible pairs."""
    names = space.feature_names
    squares = tuple(i for i, (kind, group) in enumerate(zip(space.feature_kinds, space.feature_groups))
                    if kind in ("log2", "linear") and _levels(space, group) >= 3)
    # A derived column (:mod:`.derived`) already is the interaction it stands for: it pairs with nothing.
    eligible = [i for i, kind in enumerate(space.feature_kinds) if kind != "derived"]
    if len(eligible) > ALL_PAIRS_MAX:
        fmap = FeatureMap(main_names=names, squares=(), pairs=())
        mt, st = fmap.main_prior(space, priors, "time")
        mm, sm = fmap.main_prior(space, priors, "memory")
        # Prior magnitude: how far the effect could plausibly reach, time and memory together.
        strength = np.abs(mt) + st + np.abs(mm) + sm
        order = sorted(eligible, key=lambda k: (-strength[k], names[k]))
        eligible = sorted(order[:ALL_PAIRS_MAX])
    pairs = tuple((i, j) for a, i in enumerate(eligible) for j in eligible[a + 1:]
                  if _may_interact(space, names[i], names[j], space.feature_groups[i], space.feature_groups[j]))
    return FeatureMap(main_names=names, squares=squares, pairs=pairs)


def _levels(space: SearchSpace, group: str) -> int:
    return next(len(a.levels) for a in space.axes if a.name == group)


def _may_interact(space: SearchSpace, a: str, b: str, group_a: str, group_b: str) -> bool:
    if group_a == group_b:
        return False  # two levels of one knob are never both on
    if a.startswith("patch:") and b.startswith("patch:"):
        pa, pb = space.patches[a[6:]], space.patches[b[6:]]
        if space.conflicting(pa.id, pb.id):
            return False  # never in one point: the product is always zero
        if pb.id in pa.requires or pa.id in pb.requires:
            return False  # the product equals the dependent patch's own feature
    return True
