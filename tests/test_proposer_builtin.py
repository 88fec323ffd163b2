"""The built-in proposer: offline, deterministic, free. Priors from the documented tables, patches from the
catalog entries that apply, contracts from the drafter it is handed. The proposer contract suite:
test_proposer_contract.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.proposers.builtin import BuiltinProposer
from infrarsi.contract.load import parse_contract
from infrarsi.patches import Effect, PatchSpec
from infrarsi.seams.proposer import RepoSummary, Usage
from tests.support.tinygpt import REPO

DDP = REPO / "fixtures" / "ddp"
CONTRACT = parse_contract(tomllib.loads((DDP / "infrarsi.toml").read_text()), source=Path("infrarsi.toml"),
                          root=DDP)
EFFECT = Effect(time_ratio=0.7, time_sigma=0.1, mem_ratio=1.1, mem_sigma=0.1, source="test")


def _patch(pid: str) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale=f"because {pid}", targets=("model.py::MLP",), kind="codemod",
                     codemod=pid, effect=EFFECT)


def test_drafting_needs_the_drafter_it_is_handed(tmp_path: Path) -> None:
    summary = RepoSummary(root=tmp_path, entry="train.py", flags=(), files=())
    with pytest.raises(TypeError, match="build it with drafter=bot.stages.init.draft.draft_contract"):
        BuiltinProposer().draft_contract("python train.py", summary)
    seen: list[tuple] = []

    def drafter(command: str, summary: RepoSummary, *, tokens_per_step: int | None) -> SimpleNamespace:
        seen.append((command, tokens_per_step))
        return SimpleNamespace(data={"version": 1}, notes=[("workload.command", "from the command line")])
    proposal = BuiltinProposer(drafter=drafter).draft_contract("python train.py", summary, tokens_per_step=64)
    assert proposal.ok and proposal.data == {"version": 1} and proposal.proposer == "builtin"
    assert proposal.rationale == {"workload.command": "from the command line"} and seen == [("python train.py", 64)]


def test_priors_come_from_the_knob_table_and_each_patchs_own_effect() -> None:
    table = BuiltinProposer().priors(CONTRACT, None, [_patch("fused_gelu")])
    assert table.effects["dtype=bf16"] == Effect(time_ratio=0.6, time_sigma=0.3, mem_ratio=0.85, mem_sigma=0.2,
                                                 source="docs/priors.md#knobs")
    assert table.rationale["dtype=bf16"].startswith("built-in table row ")
    assert table.effects["patch:fused_gelu"] == EFFECT and table.rationale["patch:fused_gelu"] == "because fused_gelu"
    assert "bucket_cap_mb" not in table.effects  # no row for it: the engine's default prior applies
    assert table.proposer == "builtin" and table.calls == ()


def test_patches_are_the_applicable_catalog_less_the_known_and_computed_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.patching.catalog as catalog

    runs: list[str] = []

    def applicable(contract):  # noqa: ANN001, ANN202
        runs.append(str(contract.root))
        return {"b": _patch("b"), "a": _patch("a"), "c": _patch("c")}
    monkeypatch.setattr(catalog, "applicable_patches", applicable)
    proposer = BuiltinProposer()
    first = proposer.propose_patches(CONTRACT, None, [], {"model.py": "x"}, known=[_patch("b")])
    assert [p.id for p in first.patches] == ["a", "c"] and first.proposer == "builtin"
    assert [p.id for p in proposer.propose_patches(CONTRACT, None, [], {"model.py": "x"}).patches] == ["a", "b", "c"]
    assert len(runs) == 1  # the same sources: the catalog is not run again
    proposer.propose_patches(CONTRACT, None, [], {"model.py": "y"})
    assert len(runs) == 2
    assert proposer.usage() == Usage() and proposer.charge(10, 10, 1.0) is None and proposer.usage() == Usage()
