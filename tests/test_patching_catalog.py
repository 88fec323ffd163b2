"""The built-in patch catalog: every entry a registered codemod with a prior, and where each applies in a repo
(only the editable symbols it rewrites, only code the entry point reaches)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bot.patching.catalog import CATALOG, catalog_for_repo, changed_lines, editable_files
from bot.patching.codemods import REGISTRY
from infrarsi.contract.load import parse_contract
from tests.support.tinygpt import REPO

TRAIN = """\
import torch


def build_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def unused(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def main():
    model = torch.nn.Linear(2, 2)
    build_optimizer(model)


if __name__ == "__main__":
    main()
"""


def _contract(root: Path, editable: list[str]):  # noqa: ANN202
    data = tomllib.loads((REPO / "fixtures" / "ddp" / "infrarsi.toml").read_text())
    data["workload"]["command"], data["workload"]["args"] = "python train.py", ""
    data["launch"] = {"executor": "local"}
    data["scope"] = {"editable": editable, "locked": []}
    return parse_contract(data, source=Path("infrarsi.toml"), root=root)


def test_every_entry_is_a_registered_codemod_once_with_a_sane_prior() -> None:
    names = [e.codemod for e in CATALOG]
    assert len(names) == len(set(names)) and set(names) <= set(REGISTRY)
    for entry in CATALOG:
        assert entry.title and entry.rationale and entry.effect.source
        assert 0 < entry.effect.time_ratio <= 1.5 and 0 < entry.effect.mem_ratio <= 1.5
    spec = CATALOG[0].spec(("model.py::A.forward",))
    assert (spec.id, spec.codemod, spec.kind, spec.targets) == (CATALOG[0].codemod, CATALOG[0].codemod, "codemod",
                                                                ("model.py::A.forward",))


def test_editable_python_files_map_to_their_symbols_or_the_whole_file(tmp_path: Path) -> None:
    for name in ("train.py", "model.py", "conf.yaml"):
        (tmp_path / name).write_text(TRAIN if name.endswith(".py") else "a: 1\n")
    contract = _contract(tmp_path, ["train.py::main", "train.py::unused", "model.py", "model.py::main",
                                    "conf.yaml"])
    assert editable_files(contract) == {"train.py": ["main", "unused"], "model.py": None}


def test_changed_lines_are_the_old_lines_a_rewrite_touched() -> None:
    before = "a\nb\nc\nd\n"
    assert changed_lines(before, before) == []
    assert changed_lines(before, "a\nB\nc\n") == [2, 4]
    assert changed_lines(before, "a\nb\nnew\nc\nd\n") == [2]
    assert changed_lines("x\n", "new\nx\n") == [1]


def test_a_patch_applies_only_to_reached_editable_code(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "other.py").write_text(TRAIN)
    found = {a.entry.codemod: a for a in catalog_for_repo(
        _contract(tmp_path, ["train.py::build_optimizer", "train.py::unused", "other.py"]))}
    assert len(found) == len(CATALOG)
    fused = found["optimizer_fused"]
    # the file's rewrite runs (build_optimizer is reached): it targets every editable symbol it edits
    assert fused.applies and fused.spec is not None
    assert fused.spec.targets == ("train.py::build_optimizer", "train.py::unused")
    assert "other.py: not examined: nothing on the path from the entry point imports it" in fused.reasons
    assert not found["sdpa_causal_attention"].applies and found["sdpa_causal_attention"].reasons
    # a rewrite whose every changed line never runs does not apply
    dead = {a.entry.codemod: a for a in catalog_for_repo(_contract(tmp_path, ["train.py::unused"]))}
    assert not dead["optimizer_fused"].applies
    assert any(r.startswith("train.py: does not apply: not reached from the entry point")
               for r in dead["optimizer_fused"].reasons)
