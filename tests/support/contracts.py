"""A small valid contract written into a directory, for unit tests of what reads one."""

from __future__ import annotations

from pathlib import Path

from infrarsi.contract import load_contract
from infrarsi.contract.model import Contract

MODEL = "class GPT:\n    def forward(self, x):\n        return x\n"

BASE = """\
[workload]
command = ["python", "train.py"]
tokens_per_step = 128

[scope]
editable = ["model.py::GPT.forward"]
locked = ["harness.py"]

[knobs.dtype]
kind = "categorical"
values = ["fp32", "bf16"]
default = "fp32"
flag = "--dtype"
"""

#: :data:`BASE` with a second knob.
CONTRACT = BASE + """
[knobs.micro]
kind = "int"
values = [1, 2, 3, 4]
default = 1
flag = "--micro"
"""


def write_contract(root: Path, extra: str = "") -> Contract:
    """``model.py``, ``harness.py`` and ``infrarsi.toml`` (:data:`CONTRACT` + ``extra``) in ``root``, loaded."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.py").write_text(MODEL)
    (root / "harness.py").write_text("")
    (root / "train.py").write_text("import model\n")
    (root / "infrarsi.toml").write_text(CONTRACT + extra)
    return load_contract(root)
