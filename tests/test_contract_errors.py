"""infrarsi/contract/errors.py: a malformed contract's one error, as the CLI prints it."""

from __future__ import annotations

from infrarsi.contract.errors import ContractError
from infrarsi.errors import BAD_INPUT, InfraRSIError


def test_the_message_names_the_file_the_key_and_what_was_expected() -> None:
    error = ContractError("infrarsi.toml", "knobs.mb.values", "expected a non-empty array")
    assert str(error) == "infrarsi.toml: knobs.mb.values: expected a non-empty array"
    assert (error.file, error.key, error.message) == ("infrarsi.toml", "knobs.mb.values", "expected a non-empty array")


def test_an_error_about_the_whole_file_has_no_key_in_its_message() -> None:
    assert str(ContractError("pyproject.toml", "", "no [tool.infrarsi] table")) == \
        "pyproject.toml: no [tool.infrarsi] table"


def test_it_is_bad_input_to_the_cli() -> None:
    error = ContractError("infrarsi.toml", "budget.trials", "expected an integer")
    assert isinstance(error, InfraRSIError) and error.exit_code == BAD_INPUT
