"""bot.stages.init.validate: a draft is read back as ``check`` reads it; a refused field stops ``init`` in one line."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.stages.init.errors import DraftError
from bot.stages.init.validate import validated
from bot.stages.init.toml_writer import render_contract
from tests.support.init_draft import drafted


def test_a_good_draft_gives_its_text_and_the_contract_it_loads_as(tmp_path: Path) -> None:
    draft = drafted(tmp_path)
    text, contract = validated(draft, tmp_path)
    assert text == render_contract(draft)
    assert contract.workload.tokens_per_step == 8 * 64
    assert [k.name for k in contract.knobs] == ["dtype"]


def test_a_refused_field_names_the_field_the_guess_and_its_note(tmp_path: Path) -> None:
    draft = drafted(tmp_path)
    draft.data["budget"]["trials"] = -3
    with pytest.raises(DraftError) as caught:
        validated(draft, tmp_path)
    message = str(caught.value)
    assert message.startswith("init drafted budget.trials = -3 (default), which `infrarsi check` refuses: ")
    assert message.endswith("nothing was written: give the value on --command (or --tokens-per-step, --step-regex), "
                            "or write infrarsi.toml by hand")
    assert "\n" not in message


def test_the_note_of_the_nearest_table_is_used_when_the_field_has_none(tmp_path: Path) -> None:
    draft = drafted(tmp_path)
    draft.data["knobs"]["dtype"]["default"] = "fp64"  # not one of its values
    with pytest.raises(DraftError, match=r"^init drafted knobs\.dtype\.default = 'fp64' \(guessed: --dtype looks like"):
        validated(draft, tmp_path)


def test_a_missing_data_path_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    draft = drafted(tmp_path)
    draft.set("data.paths", ["data/train.bin"], "guessed: opened by train.py")
    with pytest.raises(DraftError, match=r"init drafted .*data/train\.bin"):
        validated(draft, tmp_path)
    assert not (tmp_path / "infrarsi.toml").exists()
