"""Benches shared by the red-team tests: one per fixture, its baseline witnessed once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.redteam.bench import Bench, gpt_repo, moe_repo


@pytest.fixture(scope="session")
def gpt_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(gpt_repo(Path(tmp_path_factory.mktemp("redteam-gpt"))))


@pytest.fixture(scope="session")
def moe_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(moe_repo(Path(tmp_path_factory.mktemp("redteam-moe"))))


#: The cheats in the shared training step (train.py::train_step is the same code in both fixtures) run on
#: tinygpt in the suite, to keep CI short; ``REDTEAM_FULL=1`` runs them on tinymoe too (the acceptance run
#: of the same-computation issue). The model cheats run on each fixture always.
SHARED_FIXTURES = ["tinygpt", "tinymoe"] if os.environ.get("REDTEAM_FULL") == "1" else ["tinygpt"]


@pytest.fixture(params=SHARED_FIXTURES)
def bench(request: pytest.FixtureRequest) -> Bench:
    return request.getfixturevalue("gpt_bench" if request.param == "tinygpt" else "moe_bench")


@pytest.fixture(params=["tinygpt", "tinymoe"])
def each_bench(request: pytest.FixtureRequest) -> Bench:
    """Both fixtures always: what honest candidates must pass is checked everywhere."""
    return request.getfixturevalue("gpt_bench" if request.param == "tinygpt" else "moe_bench")
