"""``--resume`` with Slurm: a pending trial's candidate rebuilt from its commit message or its launch, and
accepted only when it hashes to the digest the journal kept. Following a live job: test_executor_slurm_run.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bot.executors.slurm.recover import candidate_of
from infrarsi.contract.load import parse_contract
from infrarsi.seams.executor import TrialSpec
from infrarsi.trial_record import Candidate
from tests.support.tinygpt import REPO

DDP = REPO / "fixtures" / "ddp"


def _contract(switch: bool):  # noqa: ANN202
    data = tomllib.loads((DDP / "infrarsi.toml").read_text())
    data["knobs"]["static_graph"]["switch"] = switch
    return parse_contract(data, source=Path("infrarsi.toml"), root=DDP)


CONTRACT = _contract(False)


def _candidate(**knobs: object) -> Candidate:
    return Candidate.of({**CONTRACT.defaults(), **knobs})


def test_the_commit_messages_description_is_read_back() -> None:
    want = _candidate(micro_batch=4, dtype="bf16")
    message = f"run-1 trial 3: {Candidate.of({'micro_batch': 4, 'dtype': 'bf16'}).describe()}\n\nbody"
    assert candidate_of(CONTRACT, want.digest(), commit_message=message, spec=None) == want


def test_the_launchs_flags_and_switches_are_read_back() -> None:
    want = _candidate(micro_batch=8, static_graph=True)
    flags = TrialSpec(argv=("python", "train.py", "--micro-batch", "2", "--static-graph", "true", "--micro-batch",
                            "8"), cwd=str(DDP))
    assert candidate_of(CONTRACT, want.digest(), commit_message=None, spec=flags) == want  # the last flag wins
    switches = TrialSpec(argv=("python", "train.py", "--static-graph", "--micro-batch", "8"), cwd=str(DDP))
    assert candidate_of(_contract(True), want.digest(), commit_message=None, spec=switches) == want
    dangling = TrialSpec(argv=("python", "train.py", "--micro-batch"), cwd=str(DDP))
    assert candidate_of(CONTRACT, _candidate().digest(), commit_message=None, spec=dangling) == _candidate()


def test_nothing_is_guessed_when_no_reading_matches_the_digest() -> None:
    want = _candidate(micro_batch=4)
    assert candidate_of(CONTRACT, want.digest(), commit_message="run-1 trial 3: micro_batch=8", spec=None) is None
    assert candidate_of(CONTRACT, want.digest(), commit_message="run-1 trial 3: no_such_knob=1", spec=None) is None
    bad = TrialSpec(argv=("python", "train.py", "--micro-batch", "seven"), cwd=".")
    assert candidate_of(CONTRACT, want.digest(), commit_message=None, spec=bad) is None
    assert candidate_of(CONTRACT, want.digest(), commit_message=None, spec=None) is None
