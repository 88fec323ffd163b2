"""With bf16 in ``[precision] allow`` and no dtype flag, the doctor measures a bf16 baseline run under the catalog's
autocast patch; where the device emulates bf16, or no autocast patch applies, it says so instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bot.stages.doctor.autocast_calibration import autocast_patch, policy_runs
from bot.stages.run.candidate import TrialContext
from infrarsi.patches import Effect, PatchSpec
from infrarsi.contract import load_contract
from infrarsi.journal import Journal
from infrarsi.report.precision_change import precision_change
from infrarsi.rundir import journal_path
from tests.support.contracts import BASE, write_contract
from tests.support.repos import commit_tree
from tests.support.tinygpt import REPO, infrarsi

EFFECT = Effect(time_ratio=0.6, time_sigma=0.2, mem_ratio=1.0, mem_sigma=0.1, source="test")
NO_DTYPE_FLAG = BASE.replace('values = ["fp32", "bf16"]', 'values = ["fp32"]')


def _spec(pid: str) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="", targets=("model.py::GPT.forward",), effect=EFFECT,
                     kind="codemod", codemod=pid, decides=("compute_dtype",))


def _ctx(root: Path, patches: dict[str, PatchSpec]) -> TrialContext:
    write_contract(root)
    (root / "infrarsi.toml").write_text(NO_DTYPE_FLAG + '\n[precision]\nallow = ["float32", "bfloat16"]\n')
    contract = load_contract(root)
    return TrialContext(contract=contract, lock=None, repo=root, executor=None, journal=None,  # type: ignore[arg-type]
                        patches=patches)


def test_the_training_loops_autocast_is_preferred_to_the_models() -> None:
    both = {p: _spec(p) for p in ("autocast_forward_bf16", "autocast_bf16")}
    assert autocast_patch(both, "bfloat16").id == "autocast_bf16"  # type: ignore[union-attr]
    assert autocast_patch({"autocast_forward_bf16": both["autocast_forward_bf16"]}, "bfloat16").id \
        == "autocast_forward_bf16"  # type: ignore[union-attr]
    assert autocast_patch({}, "bfloat16") is None


def test_an_emulated_dtype_is_not_calibrated_and_the_note_says_why(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"autocast_bf16": _spec("autocast_bf16")})
    [run] = policy_runs(ctx, run_id="r", peaks={"fp32": 100e9, "bf16": 7e9})
    assert run.record is None and run.dtype == "bfloat16" and "emulates it" in run.note


def test_without_an_applicable_autocast_patch_the_note_says_what_bf16_candidates_are_held_to(tmp_path: Path) -> None:
    [run] = policy_runs(_ctx(tmp_path, {}), run_id="r", peaks={"fp32": 100e9, "bf16": 400e9})
    assert run.record is None and "no catalog autocast patch applies" in run.note


def test_a_dtype_knob_that_offers_bf16_needs_no_policy_run(tmp_path: Path) -> None:
    contract = write_contract(tmp_path, '\n[precision]\nallow = ["float32", "bfloat16"]\n')  # BASE's knob has bf16
    ctx = TrialContext(contract=contract, lock=None, repo=tmp_path, executor=None, journal=None,  # type: ignore[arg-type]
                       patches={"autocast_bf16": _spec("autocast_bf16")})
    assert policy_runs(ctx, run_id="r") == []


# -- the acceptance: a job without a dtype flag, bf16 allowed by the policy (slow; the promotion itself: timing) ---

#: As many iterations as the bot measures (2 warm-up, 12 measured): verification's first pair has nothing past the
#: window to run on (the rows of a run stopped past it are issue 47's).
TINY = ("--n-layer 2 --n-head 2 --n-embd 64 --block-size 16 --vocab-size 64 --batch-size 4 "
        "--gradient-accumulation-steps 1 --max-iters 14")
#: Matrix products dominate: bf16 autocast ran 1.26x faster than fp32 here (AVX-512 bf16, a quiet machine).
WIDE = ("--n-layer 2 --n-head 8 --n-embd 768 --block-size 32 --vocab-size 256 --batch-size 8 "
        "--gradient-accumulation-steps 1 --max-iters 14")


def _allowing_bf16(tmp_path: Path, args: str) -> Path:
    """dropgpt (no dtype flag) with the contract init drafts, ``[precision] allow`` widened to bf16 by hand."""
    repo = tmp_path / "dropgpt"
    shutil.copytree(REPO / "fixtures" / "dropgpt", repo, ignore=shutil.ignore_patterns("__pycache__"))
    assert infrarsi("init", str(repo), "--command", f"python train.py {args}").returncode == 0
    toml = (repo / "infrarsi.toml").read_text()
    assert 'allow = ["float32"]' in toml and "[knobs.dtype]" not in toml
    (repo / "infrarsi.toml").write_text(toml.replace('allow = ["float32"]', 'allow = ["float32", "bfloat16"]'))
    assert infrarsi("lock", str(repo)).returncode == 0
    (repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    commit_tree(repo, "bf16 allowed")
    return repo


@pytest.mark.slow
def test_with_bf16_allowed_the_doctor_measures_the_autocast_patch_and_verification_holds_it_there(
        tmp_path: Path) -> None:
    repo = _allowing_bf16(tmp_path, TINY)
    doctor = infrarsi("doctor", str(repo), "--repeats", "2", "--run-id", "p")
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads((repo / ".infrarsi" / "runs" / "p" / "doctor.json").read_text())
    assert [d["dtype"] for d in report["work"]["deviations"]] == ["bfloat16"]
    assert len(report["calibration_trials"]) == 1 and "bfloat16" in report["work"]["allowed_dtypes"]
    verdict = infrarsi("verify", str(repo), "--run-id", "p", "--patch", "autocast_bf16", "--pairs", "2", "--json")
    data = json.loads(verdict.stdout)
    rows = {row["name"]: row for row in data["invariants"]}
    assert all(row["status"] == "ok" for row in data["invariants"]), [r for r in data["invariants"] if not r["ok"]]
    assert "matrix products ran in bfloat16" in rows["precision"]["detail"], rows["precision"]
    assert rows["dropout"]["status"] == "ok" and data["verdict"] in ("promoted", "not_significant"), data["reason"]


@pytest.mark.timing
def test_an_autocast_candidate_of_a_job_without_a_dtype_flag_is_promoted_and_says_so(tmp_path: Path) -> None:
    """Promoted with the doctor's measured bf16 tolerances, and the pull request's sentence for it."""
    repo = _allowing_bf16(tmp_path, WIDE)
    assert infrarsi("doctor", str(repo), "--repeats", "3", "--run-id", "p").returncode == 0
    result = infrarsi("verify", str(repo), "--run-id", "p", "--patch", "autocast_bf16", "--pairs", "6", "--json")
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "promoted", verdict["reason"]
    doctor = json.loads((repo / ".infrarsi" / "runs" / "p" / "doctor.json").read_text())
    winner = [r for r in Journal(journal_path(repo)).trials("p") if r.trial_no in verdict["candidate_trials"]]
    text = precision_change(baseline=doctor["work"]["reports"][0]["matmul_dtypes"], winner=winner,
                            policy=("float32", "bfloat16"), measured=("bfloat16",))
    assert text is not None and "run in bfloat16 instead of the baseline's float32" in text
    assert "[precision] allow" in text and "doctor measured" in text
