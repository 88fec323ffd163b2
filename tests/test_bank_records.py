"""Findings: content ids, canonical form, schema versions, immutability."""

from __future__ import annotations

import json
import pickle

import pytest

from infrarsi.bank import FINDING_SCHEMA_VERSION, WORKLOAD_KEYS, Effect, Finding, FindingOutcome
from tests.support.findings import H100, dense, make_finding
from infrarsi.trial_record import Candidate


def test_id_is_sha256_of_content_and_ignores_created_at() -> None:
    f = make_finding(3)
    assert len(f.id) == 64 and f.id == f.content_id()
    assert make_finding(3, created_at=1.0).id == f.id
    assert make_finding(4).id != f.id
    assert make_finding(3, run_id="other").id != f.id


def test_same_meaning_same_id() -> None:
    a = Finding(hardware={"device": "cuda", "gpu_count": 8.0}, workload={"family": "Dense", "parameters": 1.3e9},
                candidate=Candidate(knobs=(("b", 2), ("a", 1)), patches=("q", "p")),
                effect=Effect(time_ratio=0.9), outcome="promoted", run_id="r", repo="x", created_at=1)
    b = Finding(hardware={"gpu_count": 8, "device": "cuda"},
                workload={"parameters": 1_300_000_000, "family": "dense", "top_k": None},
                candidate=Candidate.of({"a": 1, "b": 2}, ["p", "q"]),
                effect=Effect(time_ratio=0.9), outcome=FindingOutcome.PROMOTED, run_id="r", repo="x", created_at=2)
    assert a.id == b.id
    assert set(a.workload) >= set(WORKLOAD_KEYS) and a.workload["experts"] is None


def test_json_round_trip_and_pickle() -> None:
    f = make_finding(5, patches=("fused_adamw",))
    assert Finding.from_json(f.to_json()) == f
    assert Finding.from_json(f.to_json(pretty=True)) == f
    assert f.to_json() == Finding.from_json(f.to_json()).to_json()
    assert pickle.loads(pickle.dumps(f)) == f
    assert hash(f) == hash(Finding.from_json(f.to_json()))


def test_fingerprints_are_immutable() -> None:
    f = make_finding(1)
    with pytest.raises(TypeError):
        f.hardware["device"] = "cpu"  # type: ignore[index]
    with pytest.raises(TypeError):
        f.workload.update(parameters=1)  # type: ignore[attr-defined]


def test_tampered_record_is_refused() -> None:
    data = json.loads(make_finding(1).to_json())
    data["outcome"] = "crash"
    with pytest.raises(ValueError, match="does not match"):
        Finding.from_dict(data)


def test_newer_schema_is_refused_older_is_upgraded() -> None:
    data = json.loads(make_finding(1).to_json())
    with pytest.raises(ValueError, match="newer"):
        Finding.from_dict({**data, "schema_version": FINDING_SCHEMA_VERSION + 1})
    del data["schema_version"]  # records from before versioning read as version 1
    assert Finding.from_dict(data).schema_version == FINDING_SCHEMA_VERSION


@pytest.mark.parametrize("bad", [
    {"hardware": {"device": ["cuda"]}},
    {"workload": {"family": "dense", "parameters": 1.5}},
    {"workload": {"family": "dense", "global_batch": True}},
    {"effect": {"time_ratio": float("nan")}},
    {"effect": {"time_ratio": -1.0}},
    {"effect": {"ci_low": 1.2, "ci_high": 1.1}},
])
def test_invalid_values_are_refused(bad: dict) -> None:
    fields = {"hardware": H100, "workload": dense(), "effect": {}}
    fields.update(bad)
    with pytest.raises(ValueError):
        Finding(hardware=fields["hardware"], workload=fields["workload"], candidate=Candidate.of({"a": 1}),
                effect=Effect(**fields["effect"]), outcome="promoted", run_id="r", repo="x")


def test_effect_from_speedup_inverts_the_interval() -> None:
    e = Effect.from_speedup(1.25, 1.1, 1.5, memory_ratio=0.9)
    assert e.time_ratio == pytest.approx(0.8)
    assert e.ci_low == pytest.approx(1 / 1.5) and e.ci_high == pytest.approx(1 / 1.1)
    assert e.gain == pytest.approx(0.2)
    assert Effect().gain == 0.0 and Effect(time_ratio=1.2).gain == 0.0
