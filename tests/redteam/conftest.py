"""Benches shared by the red-team tests: one per fixture, its baseline witnessed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.redteam.bench import Bench, gpt_repo, moe_repo


@pytest.fixture(scope="session")
def gpt_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(gpt_repo(Path(tmp_path_factory.mktemp("redteam-gpt"))))


@pytest.fixture(scope="session")
def moe_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(moe_repo(Path(tmp_path_factory.mktemp("redteam-moe"))))


@pytest.fixture(params=["tinygpt", "tinymoe"])
def bench(request: pytest.FixtureRequest) -> Bench:
    return request.getfixturevalue("gpt_bench" if request.param == "tinygpt" else "moe_bench")
