"""Where a promotion writes knob values: argparse defaults in the entry script, defaults in the contract."""

from __future__ import annotations

from bot.stages.apply.promotion_commit import set_argparse_defaults, set_contract_defaults

ENTRY = '''import argparse
p = argparse.ArgumentParser()
k = p.add_argument_group("knobs")
k.add_argument("--micro-batch", type=int, default=2, help="rows")
k.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="autocast dtype")
k.add_argument("--compile", type=int, choices=[0, 1], default=0)
k.add_argument("--fast", action="store_true")
p.add_argument("--lr", type=float, default=6e-4)
'''


def test_argparse_defaults_are_rewritten_in_place() -> None:
    code, found = set_argparse_defaults(ENTRY, {"--dtype": "bf16", "--micro-batch": 4, "--compile": True,
                                                "--fast": True, "--missing": 1})
    assert found == {"--dtype", "--micro-batch", "--compile", "--fast"}
    assert 'k.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="autocast dtype")' in code
    assert 'default=4, help="rows"' in code
    assert 'choices=[0, 1], default=1)' in code  # an int-typed flag keeps an int
    assert 'k.add_argument("--fast", action="store_true", default=True)' in code
    assert 'p.add_argument("--lr", type=float, default=6e-4)' in code


CONTRACT = '''[workload]
command = ["python", "train.py"]

[knobs.dtype]
flag = "--dtype"
values = ["fp32", "bf16"]
default = "fp32"  # the slow one

[knobs.micro_batch]
flag = "--micro-batch"
default = 2

[approvers]
users = []
'''


def test_contract_defaults_keep_comments_and_other_tables() -> None:
    text, done = set_contract_defaults(CONTRACT, {"dtype": "bf16", "micro_batch": 4})
    assert done == {"dtype", "micro_batch"}
    assert 'default = "bf16"  # the slow one' in text and "default = 4\n" in text
    assert text.replace('"bf16"  #', '"fp32"  #').replace("default = 4", "default = 2") == CONTRACT
    pyproject = CONTRACT.replace("[knobs.", "[tool.infrarsi.knobs.")
    _, done = set_contract_defaults(pyproject, {"dtype": "bf16"})
    assert done == {"dtype"}
