"""infrarsi/seams/forge.py: both forges take every call the seam declares (their behaviour is the shared suite's,
tests/support/forge_contract.py, run by test_forge_local.py and test_forge_github.py)."""

from __future__ import annotations

import pytest

from bot.forges.github import GitHubForge
from bot.forges.local import LocalForge
from infrarsi.seams.forge import Forge, MergeMethodRefused, PullRequest
from tests.support.seams import mismatches, protocol_members


@pytest.mark.parametrize("forge", [LocalForge, GitHubForge])
def test_each_forge_takes_every_call_the_seam_declares(forge: type) -> None:
    assert "ensure_pr" in protocol_members(Forge)
    assert mismatches(forge, Forge) == []


def test_a_refused_merge_method_says_which_and_why() -> None:
    error = MergeMethodRefused("rebase", "the repository allows squash merges only")
    assert "rebase" in str(error) and "squash merges only" in str(error)


def test_a_pull_request_is_a_frozen_record() -> None:
    pr = PullRequest(number=1, head="infrarsi/promote/r", base="main", title="t", body="b", state="open",
                     head_sha="ab" * 20, url="file:///x")
    with pytest.raises(AttributeError):
        pr.number = 2  # type: ignore[misc]
