"""Benches shared by the red-team tests: one per fixture and executor, its baseline witnessed once per session."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.redteam.bench import Bench, ddp_repo, fp32_only, gpt_repo, moe_repo
from tests.support.redteam.paths import executor_for


@pytest.fixture(scope="session")
def gpt_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(gpt_repo(Path(tmp_path_factory.mktemp("redteam-gpt"))))


@pytest.fixture(scope="session")
def fp32_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    """tinygpt with a float32-only contract (no bf16 in its dtype knob)."""
    return Bench.open(fp32_only(gpt_repo(Path(tmp_path_factory.mktemp("redteam-fp32")))))


@pytest.fixture(scope="session")
def moe_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(moe_repo(Path(tmp_path_factory.mktemp("redteam-moe"))))


@pytest.fixture(scope="session")
def bench_on(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Callable[[str], Bench]]:
    """``bench_on(executor)``: tinygpt's bench on that executor (the DDP fixture on two ranks for torchrun),
    opened once per session; the executor's side (a GitHub stand-in, the Slurm cluster) lives as long."""
    opened: dict[str, Bench] = {}
    with contextlib.ExitStack() as stack:
        def bench(name: str) -> Bench:
            if name == "local":
                return request.getfixturevalue("gpt_bench")
            if name not in opened:
                work = Path(tmp_path_factory.mktemp(f"redteam-{name}"))
                repo = ddp_repo(work) if name == "torchrun" else gpt_repo(work)
                executor = stack.enter_context(executor_for(name, repo, work, need=request.getfixturevalue))
                opened[name] = Bench.open(repo, executor=executor)
            return opened[name]
        yield bench


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
