"""The one conflict rule: which patches may share a candidate, and which knob values a patch may go with.

Two patches never share a candidate when

* they **decide** the same thing (:mod:`infrarsi.decisions`: the optimizer's implementation, the compute
  dtype, compilation, ...): a candidate holding both would not say which one takes effect;
* they **change the same symbol** (or one's inside the other's): their *claims* overlap. A claim needs
  the repo's source, so :mod:`bot.patching.conflicts` takes the claims and hands their overlaps here
  as data (``overlaps``: patch id → other id → the symbols both change);
* either **names the other** in ``conflicts_with``: the resolved form :func:`resolve` writes into the
  specs a run records (and a model's prompt shows), or an author's word for an exclusion that nothing
  above implies. The built-in catalog writes no such list: what its patches decide implies every one.

Two patches where one requires the other (directly or through others) are made to stack: neither what
they decide nor what they change makes them conflict. A patch that decides ``X`` goes only with every
knob deciding ``X`` at its default.

The search space (and its feature map), the application of one patch or of a set, the screen and the
report ask here; nothing else says whether two settings combine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from infrarsi.contract.model import Knob, KnobValue
from infrarsi.decisions import knob_decides
from infrarsi.patches import PatchSpec

#: patch id → other patch id → the symbols both change (their claims' overlap, computed from the source).
Overlaps = Mapping[str, Mapping[str, Sequence[str]]]


def stacked(a: PatchSpec, b: PatchSpec, by_id: Mapping[str, PatchSpec]) -> bool:
    """Whether one requires the other (directly or through the patches of ``by_id``): made to stack."""
    def needs(x: PatchSpec, y: str) -> bool:
        seen: set[str] = set()
        todo = list(x.requires)
        while todo:
            r = todo.pop()
            if r == y:
                return True
            if r not in seen and r in by_id:
                seen.add(r)
                todo += by_id[r].requires
        return False
    return needs(a, b.id) or needs(b, a.id)


def why(a: PatchSpec, b: PatchSpec, *, overlaps: Overlaps | None = None,
        by_id: Mapping[str, PatchSpec] | None = None) -> str | None:
    """Why ``a`` and ``b`` may not share a candidate; None when they may. ``by_id`` (default: the two)
    are the patches a chain of ``requires`` may run through."""
    if a.id == b.id:
        return None
    if b.id in a.conflicts_with or a.id in b.conflicts_with:
        return "declared"
    if stacked(a, b, by_id if by_id is not None else {a.id: a, b.id: b}):
        return None
    decided = sorted(set(a.decides) & set(b.decides))
    if decided:
        return f"both decide {', '.join(decided)}"
    symbols = (overlaps or {}).get(a.id, {}).get(b.id) or (overlaps or {}).get(b.id, {}).get(a.id)
    if symbols:
        return f"both change {', '.join(symbols)}"
    return None


def conflicts(specs: Iterable[PatchSpec], overlaps: Overlaps | None = None) -> dict[str, dict[str, str]]:
    """patch id → {other id: why} for every pair of ``specs`` that may not share a candidate (symmetric)."""
    by_id = {s.id: s for s in specs}
    ids = sorted(by_id)
    out: dict[str, dict[str, str]] = {}
    for n, a in enumerate(ids):
        for b in ids[n + 1:]:
            reason = why(by_id[a], by_id[b], overlaps=overlaps, by_id=by_id)
            if reason is not None:
                out.setdefault(a, {})[b] = reason
                out.setdefault(b, {})[a] = reason
    return out


def counted_overlaps(specs: Iterable[PatchSpec], overlaps: Overlaps) -> dict[str, dict[str, list[str]]]:
    """``overlaps`` less the pairs the rule does not count (one requires the other), as symbol lists."""
    by_id = {s.id: s for s in specs}
    return {a: kept for a, others in overlaps.items() if a in by_id
            if (kept := {b: list(symbols) for b, symbols in others.items()
                         if b in by_id and symbols and not stacked(by_id[a], by_id[b], by_id)})}


def resolve(specs: Iterable[PatchSpec], overlaps: Overlaps | None = None) -> list[PatchSpec]:
    """``specs`` with every conflict the rule finds among them written into ``conflicts_with`` (what a
    spec declared first, then the others sorted): the resolved form a run records."""
    listed = list(specs)
    found = conflicts(listed, overlaps)
    out = []
    for spec in listed:
        extra = sorted(set(found.get(spec.id, {})) - set(spec.conflicts_with))
        out.append(replace(spec, conflicts_with=spec.conflicts_with + tuple(extra)) if extra else spec)
    return out


def blocking(spec: PatchSpec, present: Iterable[PatchSpec | str]) -> list[str]:
    """The ids of ``present`` (the patches already in a tree or a set) that ``spec`` may not join, in
    their order. A bare id is judged by what ``spec`` names in ``conflicts_with`` alone."""
    listed = list(present)
    by_id = {o.id: o for o in listed if not isinstance(o, str)} | {spec.id: spec}
    out = []
    for other in listed:
        if isinstance(other, str):
            if other in spec.conflicts_with:
                out.append(other)
        elif why(spec, other, by_id=by_id) is not None:
            out.append(other.id)
    return out


def held_knobs(knobs: Iterable[Knob], patches: Iterable[PatchSpec]) -> dict[str, tuple[tuple[str, KnobValue], ...]]:
    """Per patch id, the knobs (with their defaults) that decide something the patch decides: with the patch
    in a candidate, each of them must stay at its default."""
    knobs = list(knobs)
    out: dict[str, tuple[tuple[str, KnobValue], ...]] = {}
    for spec in patches:
        held = tuple((k.name, k.default) for k in knobs if set(knob_decides(k)) & set(spec.decides))
        if held:
            out[spec.id] = held
    return out


def at_default(value: KnobValue, default: KnobValue) -> bool:
    """Equality that keeps ``True`` and ``1`` apart, as :class:`Knob` does."""
    return isinstance(value, bool) == isinstance(default, bool) and value == default


def goes_with(spec: PatchSpec, knob: Knob, value: KnobValue) -> bool:
    """Whether ``spec`` may go with ``knob`` set to ``value``: yes unless both decide the same thing and the
    value is not the knob's default."""
    return not (set(knob_decides(knob)) & set(spec.decides)) or at_default(value, knob.default)


def clashes(values: Mapping[str, KnobValue], patches: Iterable[str], knobs: Iterable[Knob],
            specs: Mapping[str, PatchSpec]) -> list[str]:
    """Why a candidate breaks the rule, in words (empty when it does not): each patch with a knob away from its
    default that decides what the patch decides, then each pair of patches that may not share it."""
    chosen = [specs[p] for p in patches if p in specs]
    knobs = list(knobs)
    out = []
    for spec in chosen:
        for knob in knobs:
            value = values.get(knob.name, knob.default)
            if not goes_with(spec, knob, value):
                shared = sorted(set(spec.decides) & set(knob_decides(knob)))
                out.append(f"patch {spec.id} and knob {knob.name}={value!r} both decide {', '.join(shared)}")
    for a, others in sorted(conflicts(chosen).items()):
        out += [f"patches {a} and {b}: {reason}" for b, reason in sorted(others.items()) if a < b]
    return out


__all__ = ["Overlaps", "at_default", "blocking", "clashes", "conflicts", "counted_overlaps", "goes_with",
           "held_knobs", "resolve", "stacked", "why"]
