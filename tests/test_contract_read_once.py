"""Each command reads the repo's contract once and hands it down (report, apply, promote)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import infrarsi.contract.load as contract_load
from bot.forges.local import LocalForge
from bot.stages.apply.merge import promote
from bot.stages.apply.open_pr import apply_run
from bot.stages.report.build import load_report
from bot.workspace import GitWorkspace
from tests.support.promotion import clone_template, promoted_template, reverify_passes  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """How often each contract file was parsed, by path (``load_contract`` always parses)."""
    seen: Counter[Path] = Counter()
    real = contract_load.parse_contract

    def counting(data, *, source, root, prefix=""):  # noqa: ANN001, ANN202
        seen[Path(source)] += 1
        return real(data, source=source, root=root, prefix=prefix)

    monkeypatch.setattr(contract_load, "parse_contract", counting)
    return seen


def test_report_apply_and_promote_each_parse_the_contract_once(promoted_template: Path,  # noqa: F811
                                                               tmp_path: Path, parses: Counter[Path]) -> None:
    repo = clone_template(promoted_template, tmp_path / "copy")
    contract = repo / "infrarsi.toml"
    load_report(repo, workspace=GitWorkspace(repo))
    assert parses[contract] == 1

    parses.clear()
    apply_run(repo, workspace=GitWorkspace(repo), say=lambda _: None)
    # the repo's contract once; the promoted tree's (new defaults, for its lock) is another file
    assert parses[contract] == 1 and sum(parses.values()) == 2

    forge = LocalForge(repo.parent / "remote.git")
    forge.submit_review(1, "alice", "APPROVED")
    parses.clear()
    result = promote(repo, 1, workspace=GitWorkspace(repo), forge=forge, reverify=reverify_passes, say=lambda _: None)
    assert result.verdict.promoted and parses[contract] == 1
