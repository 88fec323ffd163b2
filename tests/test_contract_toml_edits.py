"""The contract is written (init) and edited (apply) with tomlkit: notes and a reviewer's comments survive."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bot.stages.apply.promotion_commit import set_contract_defaults
from bot.stages.init.draft import draft_contract
from bot.stages.init.scan import scan_repo
from bot.stages.init.toml_writer import render_contract
from infrarsi.contract import parse_contract

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tinygpt"

REVIEWED = '''# InfraRSI contract
version = 1

[workload]
command = ["python", "train.py"]
tokens_per_step = 512

# reviewer: bf16 is safe here, the loss band was checked by hand

[knobs.dtype]
# guessed: --dtype looks like a knob for numeric precision
kind = "categorical"
values = ["fp32", "bf16"]
default = "fp32"   # keep the spacing before this comment
flag = "--dtype"

[knobs.micro_batch]
kind = "int"
values = [1, 2, 4]
default = 2
flag = "--micro-batch"
form = "equals"

[knobs.threads]
kind = "int"
values = [1, 2]
default = 1
env = "OMP_NUM_THREADS"
'''


def test_a_reviewers_comment_and_blank_line_survive_apply_default_rewrite() -> None:
    text, done = set_contract_defaults(REVIEWED, {"dtype": "bf16", "micro_batch": 4, "missing": 1})
    assert done == {"dtype", "micro_batch"}
    assert "# reviewer: bf16 is safe here, the loss band was checked by hand\n\n[knobs.dtype]\n" in text
    assert "# guessed: --dtype looks like a knob for numeric precision\n" in text
    assert 'default = "bf16"   # keep the spacing before this comment\n' in text
    assert text.replace('"bf16"   #', '"fp32"   #').replace("default = 4", "default = 2") == REVIEWED
    assert tomllib.loads(text)["knobs"]["micro_batch"]["default"] == 4


def test_defaults_in_pyproject_and_inline_tables() -> None:
    pyproject = ('[project]\nname = "job"\n\n# the bot\'s table\n[tool.infrarsi.workload]\ncommand = "python t.py"\n'
                 '\n[tool.infrarsi.knobs]\ndtype = { kind = "categorical", values = ["a", "b"], default = "a" }'
                 '  # inline\n')
    text, done = set_contract_defaults(pyproject, {"dtype": "b"})
    assert done == {"dtype"}
    assert text == pyproject.replace('default = "a"', 'default = "b"')


def test_init_writes_guessed_notes_as_comments_and_a_contract_that_loads(tmp_path: Path) -> None:
    summary = scan_repo(FIXTURE, "train.py")
    draft = draft_contract("python train.py --seq-len 128 --global-batch 8 --steps 6", summary)
    text = render_contract(draft)
    lines = text.splitlines()
    header = lines.index("[knobs.dtype]")
    assert lines[header - 1].startswith("# guessed: --dtype looks like a knob for numeric precision")
    assert lines[lines.index("[approvers]") + 1] == "# nobody yet: add the logins of the team leads who approve " \
                                                    "promotions"
    assert lines[lines.index("[[constraints]]") - 1] == "# guessed: the micro-batch must divide the global batch"
    assert not any(line.startswith(" ") for line in lines)  # tomlkit does not indent the knobs' keys
    data = tomllib.loads(text)
    assert data == draft.data  # every drafted value, as written
    contract = parse_contract(data, source=FIXTURE / "infrarsi.toml", root=FIXTURE)
    assert contract.knob("dtype").default == "fp32"
    edited, done = set_contract_defaults(text, {"dtype": "bf16"})
    assert done == {"dtype"} and edited.count("# guessed:") == text.count("# guessed:")
