"""Each way a knob reaches a job: the real argv builder, a real subprocess, and what the script received.

The scripts parse their arguments the way the field does: argparse (plain,
``--key=value``, dotted Lightning/torchtitan-style flags, ``store_true``,
``BooleanOptionalAction``), a nanoGPT-style configurator (module globals
overridden by ``--key=value`` through ``literal_eval``), Hydra-style overrides
(``key=value``, ``+key=value``, dotted keys, YAML scalars) and environment
variables. Each prints what it received as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from infrarsi.contract import ContractError, parse_contract
from infrarsi.contract.job_line import contract_job_line
from infrarsi.contract.model import Contract

ARGPARSE = '''
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100)
p.add_argument("--batch_size", type=int, default=1)
p.add_argument("--trainer.precision", default="32-true")
p.add_argument("--training.compile", action="store_true")
p.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True)
p.add_argument("--tf32", type=lambda s: {"true": True, "false": False}[s], default=False)
p.add_argument("--amp", type=lambda s: {"True": True, "False": False}[s], default=False)
p.add_argument("--lr_scale", type=float, default=1.0)
print(json.dumps(vars(p.parse_args())))
'''

# The configurator many research scripts use: globals, overridden by --key=value, the value a Python literal.
CONFIGURATOR = '''
import json, sys
from ast import literal_eval
batch_size = 12
compile = True
dtype = "float32"
for arg in sys.argv[1:]:
    assert arg.startswith("--") and "=" in arg, arg
    key, val = arg[2:].split("=", 1)
    assert key in globals(), key
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) == type(globals()[key]), (key, attempt)
    globals()[key] = attempt
print(json.dumps({"batch_size": batch_size, "compile": compile, "dtype": dtype}))
'''

# Hydra's override grammar, the part these knobs use: [+|++]dotted.key=value, YAML scalars, quoted strings.
HYDRA = '''
import json, re, sys
cfg = {"trainer": {"precision": "32-true", "devices": 1}, "model": {"compile": False}}
def scalar(text):
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return re.sub(r"\\\\(.)", r"\\1", text[1:-1])
    if text in ("true", "false"):
        return text == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    assert re.fullmatch(r"[A-Za-z0-9_.:/\\-+*%@$]+", text), f"unquoted value {text!r} is not a Hydra primitive"
    return text
for arg in sys.argv[1:]:
    m = re.fullmatch(r"(\\+{0,2})([A-Za-z_][\\w.\\-]*)=(.*)", arg)
    assert m, f"not an override: {arg!r}"
    plus, key, value = m.groups()
    *parents, last = key.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {}) if plus else node[p]
    assert plus or last in node, f"Could not override '{key}': no such key (use +{key}=...)"
    node[last] = scalar(value)
print(json.dumps(cfg))
'''

ENVIRON = '''
import json, os
print(json.dumps({k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "USE_FLASH", "TORCH_CUDNN_V8_API_ENABLED")}))
'''


def _contract(root: Path, script: str, knobs: str, args: str = "[]") -> Contract:
    (root / "job.py").write_text(script, encoding="utf-8")
    text = f'[workload]\ncommand = ["python", "job.py"]\nargs = {args}\ntokens_per_step = 1\n\n{knobs}'
    return parse_contract(tomllib.loads(text), source=root / "infrarsi.toml", root=root)


def _received(contract: Contract, **values: Any) -> dict[str, Any]:
    """Run the job line of ``values`` (over the defaults) and return what the script printed."""
    line = contract_job_line(contract, {**contract.defaults(), **values}, interpreter=sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "USE_FLASH")} | dict(line.env)
    done = subprocess.run(line.argv, cwd=contract.root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{line.argv}: {done.stderr[-1500:]}"
    return json.loads(done.stdout)


ARGPARSE_KNOBS = '''
[knobs.batch_size]
kind = "int"
values = [1, 2, 4]
default = 1
flag = "--batch_size"
form = "equals"

[knobs.precision]
kind = "categorical"
values = ["32-true", "bf16-mixed"]
default = "32-true"
flag = "--trainer.precision"

[knobs.compile]
kind = "bool"
default = false
flag = "--training.compile"
switch = true

[knobs.fused]
kind = "bool"
default = true
flag = "--fused"
switch = true
off_flag = "--no-fused"

[knobs.tf32]
kind = "bool"
default = false
flag = "--tf32"
form = "equals"
bool_text = ["true", "false"]

[knobs.amp]
kind = "bool"
default = false
flag = "--amp"
bool_text = ["True", "False"]

[knobs.lr_scale]
kind = "float"
low = 0.5
high = 2.0
default = 1.0
flag = "--lr_scale"
'''


def test_argparse_conventions(tmp_path: Path) -> None:
    contract = _contract(tmp_path, ARGPARSE, ARGPARSE_KNOBS, args='["--steps", "8"]')
    baseline = _received(contract)
    assert baseline == {"steps": 8, "batch_size": 1, "trainer.precision": "32-true", "training.compile": False,
                        "fused": True, "tf32": False, "amp": False, "lr_scale": 1.0}
    changed = _received(contract, batch_size=4, precision="bf16-mixed", compile=True, fused=False, tf32=True,
                        amp=True, lr_scale=0.75)
    assert changed == {"steps": 8, "batch_size": 4, "trainer.precision": "bf16-mixed", "training.compile": True,
                       "fused": False, "tf32": True, "amp": True, "lr_scale": 0.75}
    argv = contract_job_line(contract, {**contract.defaults(), "compile": True, "fused": False}).argv
    assert argv[2:] == ("--steps", "8", "--batch_size=1", "--trainer.precision", "32-true", "--training.compile",
                        "--no-fused", "--tf32=false", "--amp", "False", "--lr_scale", "1.0")
    bare = contract_job_line(contract, contract.defaults()).argv
    assert "--training.compile" not in bare and "--fused" in bare and "--no-fused" not in bare


def test_configurator_globals_take_key_equals_value(tmp_path: Path) -> None:
    contract = _contract(tmp_path, CONFIGURATOR, '''
[knobs.batch_size]
kind = "int"
values = [4, 8, 12]
default = 12
flag = "--batch_size"
form = "equals"

[knobs.compile]
kind = "bool"
default = true
flag = "--compile"
form = "equals"
bool_text = ["True", "False"]

[knobs.dtype]
kind = "categorical"
values = ["float32", "bfloat16"]
default = "float32"
flag = "--dtype"
form = "equals"
''')
    assert _received(contract) == {"batch_size": 12, "compile": True, "dtype": "float32"}
    assert _received(contract, batch_size=4, compile=False, dtype="bfloat16") == \
        {"batch_size": 4, "compile": False, "dtype": "bfloat16"}


def test_hydra_overrides(tmp_path: Path) -> None:
    contract = _contract(tmp_path, HYDRA, '''
[knobs.precision]
kind = "categorical"
values = ["32-true", "bf16-mixed", "16 mixed"]
default = "32-true"
override = "trainer.precision"

[knobs.compile]
kind = "bool"
default = false
override = "model.compile"

[knobs.workers]
kind = "int"
values = [0, 2, 4]
default = 0
override = "+data.num_workers"
''', args='["trainer.devices=1"]')
    assert _received(contract) == {"trainer": {"precision": "32-true", "devices": 1}, "model": {"compile": False},
                                   "data": {"num_workers": 0}}
    got = _received(contract, precision="bf16-mixed", compile=True, workers=4)
    assert got == {"trainer": {"precision": "bf16-mixed", "devices": 1}, "model": {"compile": True},
                   "data": {"num_workers": 4}}
    assert _received(contract, precision="16 mixed")["trainer"]["precision"] == "16 mixed"  # quoted for Hydra
    line = contract_job_line(contract, {**contract.defaults(), "precision": "16 mixed"})
    assert line.argv[2:] == ("trainer.devices=1", "trainer.precision='16 mixed'", "model.compile=false",
                             "+data.num_workers=0")


def test_environment_variables(tmp_path: Path) -> None:
    contract = _contract(tmp_path, ENVIRON, '''
[knobs.threads]
kind = "int"
values = [1, 2, 4]
default = 1
env = "OMP_NUM_THREADS"

[knobs.flash]
kind = "bool"
default = false
env = "USE_FLASH"
''')
    assert _received(contract)["OMP_NUM_THREADS"] == "1" and _received(contract)["USE_FLASH"] == "0"
    got = _received(contract, threads=4, flash=True)
    assert got["OMP_NUM_THREADS"] == "4" and got["USE_FLASH"] == "1"
    line = contract_job_line(contract, {"threads": 2, "flash": True})
    assert line.shell() == "OMP_NUM_THREADS=2 USE_FLASH=1 python job.py"


@pytest.mark.parametrize("knob, message", [
    ('kind = "int"\nvalues = [1]\ndefault = 1\nflag = "--x"\noverride = "x"',
     "knobs.x.flag: expected exactly one of 'flag'"),
    ('kind = "int"\nvalues = [1]\ndefault = 1\noverride = "a..b"',
     "knobs.x.override: expected a Hydra override key"),
    ('kind = "int"\nvalues = [1]\ndefault = 1\nenv = "X"\nform = "equals"',
     "knobs.x.form: expected only on a knob passed as a flag"),
    ('kind = "int"\nvalues = [1]\ndefault = 1\nflag = "--x"\nform = "joined"',
     "knobs.x.form: expected one of 'separate', 'equals'"),
    ('kind = "bool"\ndefault = false\nflag = "--x"\noff_flag = "--no-x"',
     "knobs.x.off_flag: expected a flag starting with '-' other than '--x', on a knob with switch = true"),
    ('kind = "bool"\ndefault = false\nflag = "--x"\nswitch = true\nbool_text = ["yes", "no"]',
     "knobs.x.bool_text: expected only on a bool knob passed with a value"),
    ('kind = "bool"\ndefault = false\nflag = "--x"\nbool_text = ["on", "on"]',
     "knobs.x.bool_text: expected two different strings"),
    ('kind = "int"\nvalues = [1]\ndefault = 1\noverride = "steps"',
     "knobs.x.override: expected a key that workload.args does not already override, got 'steps'"),
    ('kind = "bool"\ndefault = false\nflag = "--x"\nswitch = true\noff_flag = "--fixed"',
     "knobs.x.off_flag: expected a flag that workload.command and workload.args do not already set"),
])
def test_malformed_passing_is_one_line_naming_the_key(tmp_path: Path, knob: str, message: str) -> None:
    with pytest.raises(ContractError) as info:
        _contract(tmp_path, "", f"[knobs.x]\n{knob}\n", args='["steps=8", "--fixed"]')
    assert message in str(info.value) and "\n" not in str(info.value)


def test_todays_contracts_pass_knobs_as_before(tmp_path: Path) -> None:
    contract = _contract(tmp_path, ARGPARSE, '''
[knobs.batch_size]
kind = "int"
values = [1, 2]
default = 2
flag = "--batch_size"

[knobs.tf32]
kind = "bool"
default = true
flag = "--tf32"
''')
    knob = contract.knob("tf32")
    assert (knob.form, knob.switch, knob.off_flag, knob.override, knob.bool_text) == \
        ("separate", False, None, None, ("1", "0"))
    assert contract_job_line(contract, contract.defaults()).argv == \
        ("python", "job.py", "--batch_size", "2", "--tf32", "1")
