"""How a file can refer to a dotted name with the imports it already has, and how it binds names."""

from __future__ import annotations

import libcst as cst

from bot.patching.codemods.imports import module_bindings, name_use, reference

SOURCE = """\
import torch
import torch.nn.functional as F
import numpy.linalg
from torch import nn as tnn, optim
from . import sibling
from os.path import *
if TYPE_CHECKING:
    import typing_only
try:
    import apex
except ImportError:
    pass
if HAVE_X:
    import xformers
else:
    import flash
"""


def test_top_level_imports_are_bound_and_type_checking_ones_are_not() -> None:
    assert module_bindings(cst.parse_module(SOURCE)) == {
        "torch": "torch", "F": "torch.nn.functional", "numpy": "numpy", "tnn": "torch.nn", "optim": "torch.optim",
        "apex": "apex", "xformers": "xformers", "flash": "flash"}
    nested = cst.parse_module("def f():\n    import torch\n")
    assert module_bindings(nested) == {}


def test_the_most_specific_binding_spells_a_reference() -> None:
    bindings = module_bindings(cst.parse_module(SOURCE))
    assert reference(bindings, "torch.nn.functional.gelu") == "F.gelu"
    assert reference(bindings, "torch.nn.Linear") == "tnn.Linear"
    assert reference(bindings, "torch.tanh") == "torch.tanh"
    assert reference(bindings, "torch") == "torch"
    assert reference(bindings, "math.sqrt") is None
    assert reference({"b": "torch.nn", "a": "torch.nn"}, "torch.nn.ReLU") == "a.ReLU"  # ties: the first name
    assert reference({"torchvision": "torchvision"}, "torch.x") is None  # a prefix of a name is not a module


def test_names_bound_other_than_by_one_module_import_are_rebound() -> None:
    use = name_use(cst.parse_module(
        "import torch\nimport math\nimport math\nfrom x import *\n"
        "F = 1\nfor i, (j, *k) in []: pass\nwith open(p) as fh: pass\n"
        "def f(a, *, b):\n    import json\n    global G\n    return [c for c in a if (d := c)]\n"
        "class K: pass\ndel e\n"))
    assert use.star
    assert use.nested == frozenset({"json"})
    assert {"F", "i", "j", "k", "fh", "f", "a", "b", "G", "c", "d", "K", "e", "math", "json"} <= use.rebound
    assert "torch" not in use.rebound
    plain = name_use(cst.parse_module("import torch\nx = torch.ones(1)\n"))
    assert (plain.star, plain.nested, plain.rebound) == (False, frozenset(), frozenset({"x"}))
