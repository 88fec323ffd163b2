"""What a module's forward changes outside the call, read statically (the checkpointing codemod declines there)."""

from __future__ import annotations

import textwrap

import libcst as cst

from bot.patching.codemods.side_effects import held_class, outside_mutations
from tests.support.tinygpt import REPO


def _module(text: str) -> cst.Module:
    return cst.parse_module(textwrap.dedent(text))


def test_the_fixtures_blocks_change_nothing_outside_themselves() -> None:
    for fixture, model, owner in (("tinygpt", "GPT", "GPT"), ("tinymoe", "MoEGPT", "MoEGPT")):
        module = cst.parse_module((REPO / "fixtures" / fixture / "model.py").read_text())
        block = held_class(module, owner, "blocks")
        assert block == "Block", fixture
        assert outside_mutations(module, block) == [], (fixture, model)


def test_module_level_objects_functions_and_globals_are_followed() -> None:
    module = _module("""
        import torch
        LOG = []
        COUNTS = {"calls": 0}

        def note(x):
            global LAST
            LAST = x
            return x

        class Block(torch.nn.Module):
            def forward(self, x):
                LOG.append(x.shape)
                COUNTS["calls"] = COUNTS["calls"] + 1
                return note(self.inner(x))

            def inner(self, x):
                return x * 2
    """)
    found = outside_mutations(module, "Block")
    assert any("LOG.append(x.shape)" in f and "module-level LOG" in f for f in found), found
    assert any("COUNTS[\"calls\"] = " in f and "writes into the module-level COUNTS" in f for f in found), found
    assert any(f.startswith("note: `global LAST`") for f in found), found


def test_reads_of_objects_and_a_plain_attribute_are_not_mutations() -> None:
    module = _module("""
        import torch
        import torch.nn.functional as F
        TABLE = {"a": 1}

        class Block(torch.nn.Module):
            def forward(self, x):
                self.last = x.mean()
                scale = TABLE.get("a")
                return F.gelu(x) * scale
    """)
    assert outside_mutations(module, "Block") == []


def test_a_class_defined_elsewhere_is_not_read() -> None:
    module = _module("""
        import torch
        from layers import Block

        class GPT(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])
    """)
    assert held_class(module, "GPT", "blocks") is None
