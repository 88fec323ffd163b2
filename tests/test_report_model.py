"""The report's model: where a knob is set, the reproduce line, patch provenance, the winner's features and (short)
dtype."""

from __future__ import annotations

from types import SimpleNamespace

from infrarsi.contract.model import Knob
from infrarsi.report.model import (PatchInfo, command_line, feature_parts, patch_infos, where_set, winner_dtype,
                                   winner_features)
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

DTYPE = Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype")
MICRO = Knob(name="micro", kind="int", default=1, values=(1, 2, 4), flag="--micro", form="equals")
COMPILE = Knob(name="compile", kind="bool", default=False, flag="--compile", switch=True)


def test_where_set() -> None:
    assert where_set(DTYPE, "train.py") == "--dtype flag of train.py"
    assert where_set(COMPILE, "train.py") == "--compile switch of train.py"
    assert where_set(Knob(name="t", kind="int", default=1, values=(1, 2), env="OMP"), "x") == \
        "environment variable OMP"
    assert where_set(Knob(name="pp", kind="int", default=1, values=(1, 2), override="model.pp"), "train.py") == \
        "model.pp override of train.py"


def test_command_line_passes_every_knob_from_the_repos_root() -> None:
    knobs = [DTYPE, MICRO, COMPILE]
    line = command_line(["python", "train.py"], ["--steps", "5"], knobs, {"micro": 4, "compile": True})
    assert line == "python train.py --steps 5 --dtype fp32 --micro=4 --compile"
    assert command_line(["python", "t.py"], [], [], {}, workdir="sub dir", env=(("A", "1"),)) == \
        "cd 'sub dir' && A=1 python t.py"


def test_patch_infos_take_the_models_proposals_over_the_catalog() -> None:
    catalog = {"fuse": SimpleNamespace(targets=["m.py::f"], title="Fuse", rationale="fewer kernels",
                                       replacement="def f(): ..."),
               "other": SimpleNamespace(targets=["m.py"], title="Other", rationale="r", replacement=None)}
    llm = {"model": "claude", "patches_proposed": [
        {"id": "fuse", "title": "Fuse it", "rationale": "why", "evidence": "profile", "spec": {
            "targets": ["m.py::g"], "replacement": "def g(): ..."}}]}
    infos = patch_infos(llm, catalog)
    assert infos["other"] == PatchInfo(targets=("m.py",), author="catalog", title="Other", rationale="r")
    assert infos["fuse"] == PatchInfo(targets=("m.py::g",), author="model claude", title="Fuse it", rationale="why",
                                      evidence="profile", source="def g(): ...")
    assert patch_infos(None) == {}


def test_winner_features_are_the_nonzero_main_features() -> None:
    knobs = [DTYPE, MICRO, COMPILE]
    winner = Candidate.of({"dtype": "bf16", "micro": 1, "compile": True}, ("fuse",))
    assert winner_features(winner, knobs) == {"patch:fuse", "dtype=bf16", "dtype", "compile=True", "compile"}
    assert winner_features(None, knobs) == frozenset()
    assert winner_features(Candidate.of({"dtype": "fp32", "micro": 1}), knobs) == frozenset()


def test_feature_parts() -> None:
    mains = frozenset({"micro", "dtype=bf16", "patch:a*b"})
    assert feature_parts("micro", mains) == ("micro",)
    assert feature_parts("micro^2", mains) == ("micro",)
    assert feature_parts("micro*dtype=bf16", mains) == ("micro", "dtype=bf16")
    assert feature_parts("patch:a*b", mains) == ("patch:a*b",)  # a main feature whose name holds a '*'
    assert feature_parts("unknown*x", mains) == ("unknown*x",)


def test_winner_dtype_is_the_witnessed_else_the_knobs_else_the_fallback() -> None:
    bf16 = Candidate.of({"dtype": "bf16"})
    witnessed = TrialRecord(run_id="r", trial_no=1, candidate=bf16, outcome=Outcome.OK,
                            metrics=TrialMetrics(step_time_s=1.0, witness={"matmul_dtypes": ["float16"]}))
    assert winner_dtype([witnessed], bf16, [DTYPE], "fp32") == "fp16"
    assert winner_dtype([], bf16, [DTYPE], "fp32") == "bf16"
    assert winner_dtype([], Candidate.of({"dtype": "fp8x"}), [DTYPE], "fp32") == "fp32"
    assert winner_dtype([], None, [DTYPE], "fp32") == "fp32"


def test_quarantined_patches_come_from_the_models_proposals_and_from_candidates_never_run() -> None:
    from infrarsi.report.model import quarantined_patches

    finding = {"kind": "quarantined", "path": "train.py", "line": 41, "symbol": "train_step", "construct": "os.dup2",
               "why": "low-level fd trick: x"}
    change = {"path": "train.py", "symbol": "train_step", "line_start": 30, "line_end": 50, "lines_added": 3,
              "lines_removed": 1}
    relay = TrialRecord(run_id="r", trial_no=7, candidate=Candidate.of({}, ("relay",)), outcome=Outcome.REJECTED,
                        reason="quarantined for review: train.py:41: os.dup2 (low-level fd trick: x)",
                        audit=(change, finding))
    again = TrialRecord(run_id="r", trial_no=9, candidate=Candidate.of({"dtype": "bf16"}, ("relay",)),
                        outcome=Outcome.REJECTED, reason=relay.reason, audit=(change, finding))
    scope = TrialRecord(run_id="r", trial_no=8, candidate=Candidate.of({}, ("locked",)), outcome=Outcome.REJECTED,
                        reason="outside the editable scope: harness.py")
    llm = {"patches_proposed": [{"id": "llm_a", "status": "quarantined", "reason":
                                 "model.py:3: builtins.exec (code from a string: y); model.py:4: os.write (z)"},
                                {"id": "llm_b", "status": "rejected", "reason": "outside the editable scope"}]}
    found = quarantined_patches([again, scope, relay], llm)
    assert [(q.patches, q.when) for q in found] == [(("llm_a",), "when proposed"), (("relay",), "trial 7")]
    assert found[0].findings == ("model.py:3: builtins.exec (code from a string: y)", "model.py:4: os.write (z)")
    assert found[1].findings == ("train.py:41: os.dup2 (low-level fd trick: x)",)
