"""bot.stages.init.toml_writer: a drafted contract rendered as TOML, each note a comment above its value."""
from __future__ import annotations

import tomllib

import tomlkit

from bot.stages.init.draft import ContractDraft
from bot.stages.init.toml_writer import render_contract


def _draft() -> ContractDraft:
    d = ContractDraft()
    d.set("version", 1)
    d.set("workload.command", ["python", "train.py"], "the entry command\nsecond line")
    d.set("workload.args", ["--steps", "10"])
    d.set("knobs.dtype.kind", "categorical")
    d.set("knobs.dtype.values", ["fp32", "bf16"])
    d.notes["knobs.dtype"] = "guessed: numeric precision"
    d.data["constraints"] = [{"kind": "divides", "knob": "mb", "value": 8},
                             {"kind": "forbid", "when": {"bf16": True, "fp16": True}}]
    d.notes["constraints"] = "guessed: whole micro-batches"
    d.set("data.paths", [])
    return d


def test_the_text_loads_back_as_the_drafted_data() -> None:
    draft = _draft()
    assert tomllib.loads(render_contract(draft)) == draft.data


def test_it_starts_with_the_header_and_ends_with_one_newline() -> None:
    text = render_contract(_draft())
    assert text.startswith("# InfraRSI contract: the task every candidate must do the same way, only faster.\n")
    assert "rerun `infrarsi lock`" in text.splitlines()[2]
    assert text.endswith("]\n") and not text.endswith("\n\n")


def test_each_note_is_a_comment_right_above_its_value_or_table() -> None:
    lines = render_contract(_draft()).splitlines()
    at = lines.index('command = ["python", "train.py"]')
    assert lines[at - 2:at] == ["# the entry command", "# second line"]
    assert lines[lines.index("[knobs.dtype]") - 1] == "# guessed: numeric precision"
    assert lines[lines.index("[[constraints]]") - 1] == "# guessed: whole micro-batches"
    assert lines.count("[[constraints]]") == 2
    assert "# guessed: whole micro-batches" not in lines[lines.index("[[constraints]]") + 1:]


def test_the_notes_survive_a_tomlkit_edit() -> None:
    doc = tomlkit.parse(render_contract(_draft()))
    doc["workload"]["args"] = ["--steps", "20"]  # type: ignore[index]
    text = tomlkit.dumps(doc)
    assert "# the entry command" in text and "# guessed: numeric precision" in text
    assert tomllib.loads(text)["workload"]["args"] == ["--steps", "20"]


def test_an_empty_table_is_still_written() -> None:
    d = ContractDraft()
    d.set("version", 1)
    d.data["scope"] = {}
    assert tomllib.loads(render_contract(d)) == {"version": 1, "scope": {}}
