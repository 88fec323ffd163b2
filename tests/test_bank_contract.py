"""The contract every experience-bank backend must honour.

To add a backend, add a factory to ``BACKENDS``: a function of a directory
that opens the backend's store there (opening the same directory twice must
reach the same store, which is how persistence is tested).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infrarsi.bank import Bank, FindingOutcome, SqliteBank
from tests.support.findings import A100, CPU, H100, dense, make_finding, moe

BankFactory = Callable[[Path], Bank]


def _sqlite(directory: Path) -> Bank:
    return SqliteBank(directory / "bank.sqlite")


BACKENDS: list[BankFactory] = [_sqlite]


@pytest.fixture(params=BACKENDS, ids=lambda f: f.__name__.strip("_"))
def factory(request: pytest.FixtureRequest) -> BankFactory:
    return request.param


@pytest.fixture
def bank(factory: BankFactory, tmp_path: Path) -> Iterator[Bank]:
    b = factory(tmp_path / "a")
    yield b
    b.close()


def test_an_empty_bank_answers_every_verb(bank: Bank, tmp_path: Path) -> None:
    """Every verb of the Protocol works before anything was stored (a new cluster's first run)."""
    assert bank.ids() == frozenset() and bank.findings() == []
    assert bank.similar(H100, dense()) == []
    out = tmp_path / "empty.jsonl"
    assert bank.export_jsonl(out) == 0 and out.read_text() == ""
    assert bank.import_jsonl(out) == 0 and bank.add_many([]) == 0


def test_add_then_find(bank: Bank) -> None:
    f = make_finding(1)
    assert bank.add(f) is True
    assert bank.findings() == [f]
    assert bank.ids() == {f.id}


def test_add_is_idempotent_on_id(bank: Bank) -> None:
    f = make_finding(1)
    assert bank.add(f)
    assert bank.add(f) is False
    # the same finding recorded again later is still the same finding
    again = make_finding(1, created_at=1_800_000_000.0 - 1)
    assert again.id == f.id and again.created_at != f.created_at
    assert bank.add(again) is False
    assert len(bank.findings()) == 1


def test_add_many_counts_new_ones(bank: Bank) -> None:
    fs = [make_finding(i) for i in range(5)]
    assert bank.add_many(fs[:3]) == 3
    assert bank.add_many(fs) == 2
    assert bank.add_many([]) == 0
    assert {f.id for f in bank.findings()} == {f.id for f in fs}


def test_findings_oldest_first(bank: Bank) -> None:
    fs = [make_finding(i) for i in range(4)]
    bank.add_many(reversed(fs))
    assert bank.findings() == fs


def test_persists_across_reopen(factory: BankFactory, tmp_path: Path) -> None:
    first = factory(tmp_path / "p")
    first.add(make_finding(7))
    first.close()
    second = factory(tmp_path / "p")
    try:
        assert second.findings() == [make_finding(7)]
    finally:
        second.close()


def test_export_import_round_trip(factory: BankFactory, tmp_path: Path) -> None:
    source, target = factory(tmp_path / "src"), factory(tmp_path / "dst")
    try:
        fs = [make_finding(i) for i in range(6)] + [make_finding(9, outcome=FindingOutcome.OOM, time_ratio=None)]
        source.add_many(fs)
        path = tmp_path / "out" / "bank.jsonl"
        assert source.export_jsonl(path) == len(fs)
        lines = path.read_text().splitlines()
        assert len(lines) == len(fs) and all(json.loads(line)["id"] for line in lines)
        target.add(fs[0])
        assert target.import_jsonl(path) == len(fs) - 1  # only new ones are counted
        assert target.import_jsonl(path) == 0
        assert target.findings() == source.findings()
    finally:
        source.close()
        target.close()


def test_import_rejects_a_tampered_file_whole(bank: Bank, tmp_path: Path) -> None:
    good = make_finding(1).to_json()
    bad = json.loads(make_finding(2).to_json())
    bad["effect"]["time_ratio"] = 0.1  # edited after the fact: the id no longer matches
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        bank.import_jsonl(path)
    assert bank.findings() == []  # all or nothing


def test_similar_ranks_the_closest_workload_first(bank: Bank) -> None:
    near = make_finding(1, workload=dense(1_400_000_000), knobs={"compile": True})
    far = make_finding(2, workload=dense(70_000_000_000), knobs={"fused_adam": True})
    other_family = make_finding(3, workload=moe(), knobs={"expert_parallel": 8}, time_ratio=0.5)
    bank.add_many([far, other_family, near])
    got = bank.similar(H100, dense(1_300_000_000), top=5)
    assert [t.candidate for t in got] == [near.candidate, far.candidate]
    assert got[0].finding_ids == (near.id,) and got[0].same_hardware
    assert 0 < got[1].weight < got[0].weight <= 1


def test_similar_prefers_this_hardware_and_top_limits(bank: Bank) -> None:
    here = make_finding(1, knobs={"a": 1}, time_ratio=0.9)
    a100 = make_finding(2, hardware=A100, knobs={"b": 1}, time_ratio=0.9)
    cpu = make_finding(3, hardware=CPU, knobs={"c": 1}, time_ratio=0.9)
    bank.add_many([cpu, a100, here])
    got = bank.similar(H100, dense(), top=2)
    assert [t.candidate for t in got] == [here.candidate, a100.candidate]
    assert got[0].same_hardware and not got[1].same_hardware
    assert got[1].weight <= 0.5 * got[0].weight  # another machine's finding is only a prior


def test_similar_ignores_non_promoted_and_penalises_failures(bank: Bank) -> None:
    good = make_finding(1, knobs={"x": 1})
    flat = make_finding(2, knobs={"y": 1}, outcome=FindingOutcome.NOT_SIGNIFICANT, time_ratio=0.99)
    won_then_oom = make_finding(3, knobs={"z": 1}, time_ratio=0.5)
    oom_here = make_finding(4, knobs={"z": 1}, outcome=FindingOutcome.OOM, time_ratio=None)
    bank.add_many([good, flat, won_then_oom, oom_here])
    got = bank.similar(H100, dense(), top=5)
    assert [t.candidate for t in got] == [good.candidate]  # z OOMed on this very setup: ruled out
