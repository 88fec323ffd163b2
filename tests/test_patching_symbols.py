"""Qualified names of definitions in a libcst tree, as the contract's scope names them."""

from __future__ import annotations

import libcst as cst

from bot.patching.symbols import code_of, covers, def_sites, definitions, split_target

SOURCE = """\
class GPT:
    def forward(self, x):
        def inner(y):
            return y
        return inner(x)

    class Block:
        pass

if True:
    def helper():
        pass
try:
    def helper():
        return 1
except ImportError:
    pass
"""


def test_every_definition_is_named_through_its_enclosing_ones_in_source_order() -> None:
    sites = def_sites(cst.parse_module(SOURCE))
    assert [s.qualname for s in sites] == ["GPT", "GPT.forward", "GPT.forward.inner", "GPT.Block", "helper",
                                           "helper"]
    assert isinstance(sites[1].node, cst.FunctionDef) and sites[1].node.name.value == "forward"


def test_redefinitions_are_kept_together() -> None:
    defs = definitions(cst.parse_module(SOURCE))
    assert len(defs["helper"]) == 2 and len(defs["GPT"]) == 1
    assert "return 1" in code_of(defs["helper"][1])


def test_names_are_relative_to_the_walked_node() -> None:
    gpt = definitions(cst.parse_module(SOURCE))["GPT"][0]
    assert [s.qualname for s in def_sites(gpt.body)] == ["forward", "forward.inner", "Block"]


def test_a_scope_entry_covers_itself_and_what_is_inside_it() -> None:
    assert covers("GPT", "GPT") and covers("GPT", "GPT.forward.inner")
    assert not covers("GPT", "GPTBlock") and not covers("GPT.forward", "GPT")


def test_targets_split_into_path_and_symbol() -> None:
    assert split_target("model.py::GPT.forward") == ("model.py", "GPT.forward")
    assert split_target("model.py") == ("model.py", None)
    assert split_target("model.py::") == ("model.py", "")


def test_code_of_prints_a_node_as_in_a_module() -> None:
    node = cst.parse_statement("x  =  1  # keep\n")
    assert code_of(node) == "x  =  1  # keep\n"
