"""Candidates read from ``--knob name=value`` strings and from :meth:`Candidate.describe`'s text."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.candidates import CandidateError, candidate_from_description, make_candidate, parse_knob_value
from infrarsi.errors import BAD_INPUT
from infrarsi.trial_record import Candidate
from tests.support.contracts import write_contract

DIVIDES = '\n[[constraints]]\nkind = "divides"\nknob = "micro"\nvalue = 8\n'


def test_assignments_override_the_defaults_with_typed_values(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    c = make_candidate(contract, ["micro=4", " dtype = bf16 "], ("p",))
    assert c == Candidate.of({"dtype": "bf16", "micro": 4}, ("p",))
    assert make_candidate(contract, []) == Candidate.of({"dtype": "fp32", "micro": 1})


@pytest.mark.parametrize(("items", "message"), [
    (["nope=1"], "unknown knob 'nope' (the contract defines: dtype, micro)"),
    (["micro"], "expected --knob name=value, got 'micro'"),
    (["dtype=fp8"], "knob dtype: expected one of 'fp32', 'bf16', got 'fp8'"),
    (["micro=x"], "knob micro: expected one of 1, 2, 3, 4, got 'x'"),
    (["micro=3"], "candidate violates a constraint: micro must divide 8"),
])
def test_a_bad_assignment_is_a_bad_input_error_that_says_why(tmp_path: Path, items: list[str], message: str) -> None:
    contract = write_contract(tmp_path, DIVIDES)
    with pytest.raises(CandidateError) as info:
        make_candidate(contract, items)
    assert str(info.value) == message
    assert info.value.exit_code == BAD_INPUT and isinstance(info.value, ValueError)


def test_parse_knob_value_types_against_the_knob(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    assert parse_knob_value(contract, "micro", "2") == 2
    assert parse_knob_value(contract, "dtype", "bf16") == "bf16"


def test_a_description_reads_back_to_the_candidate_that_ran_without_rechecking_constraints(tmp_path: Path) -> None:
    contract = write_contract(tmp_path, DIVIDES)
    ran = Candidate.of({"dtype": "bf16", "micro": 3}, ("p1", "p2"))
    assert candidate_from_description(contract, ran.describe()) == ran
    assert candidate_from_description(contract, "(baseline)") == Candidate.of(contract.defaults())
    assert candidate_from_description(contract, "micro=2") == Candidate.of({"dtype": "fp32", "micro": 2})
    with pytest.raises(CandidateError, match="unknown knob 'lr'"):
        candidate_from_description(contract, "lr=0.1")
