"""A candidate read from text: ``--knob name=value`` strings and :meth:`Candidate.describe`'s form, typed
against the contract (the one reader both the command line and a recovered trial's commit message use)."""

from __future__ import annotations

from infrarsi.contract.knob_codec import KnobValueError
from infrarsi.contract.model import Contract, KnobValue
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.trial_record import Candidate, parse_description

__all__ = ["CandidateError", "candidate_from_description", "make_candidate", "parse_knob_value"]


class CandidateError(InfraRSIError, ValueError):
    """A candidate that names an unknown knob or a value outside its domain."""

    exit_code = BAD_INPUT


def parse_knob_value(contract: Contract, name: str, text: str) -> KnobValue:
    """A ``--knob name=value`` string as a value of that knob's type, checked against its domain."""
    try:
        knob = contract.knob(name)
    except KeyError:
        known = ", ".join(k.name for k in contract.knobs) or "none"
        raise CandidateError(f"unknown knob {name!r} (the contract defines: {known})") from None
    try:
        return knob.codec.from_cli(text)
    except KnobValueError as exc:
        raise CandidateError(str(exc)) from None


def make_candidate(contract: Contract, assignments: list[str], patches: tuple[str, ...] = ()) -> Candidate:
    """The contract's defaults overridden by ``name=value`` strings; constraints checked."""
    values = contract.defaults()
    for item in assignments:
        name, sep, text = item.partition("=")
        if not sep:
            raise CandidateError(f"expected --knob name=value, got {item!r}")
        values[name.strip()] = parse_knob_value(contract, name.strip(), text.strip())
    for c in contract.constraints:
        if not c.allows(values):
            raise CandidateError(f"candidate violates a constraint: {c.describe()}"
                                 + (f" ({c.reason})" if c.reason else ""))
    return Candidate.of(values, patches)


def candidate_from_description(contract: Contract, text: str) -> Candidate:
    """:meth:`Candidate.describe`'s text (a trial's commit message carries it) as the candidate that ran: the
    contract's defaults with the described knobs typed over them. Raises :class:`CandidateError` for a knob the
    contract does not define or a value outside its domain; constraints are not re-checked (it ran)."""
    values = contract.defaults()
    knobs, patches = parse_description(text)
    for name, value in knobs:
        values[name] = parse_knob_value(contract, name, value)
    return Candidate.of(values, patches)
