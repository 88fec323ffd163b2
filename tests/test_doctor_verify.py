"""Doctor and verification on the real fixture: the report, A/A, and candidates that must be invalid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bot.stages.run.candidate import TrialContext, trial_context

from bot.executors.local import LocalExecutor
from bot.workspace import GitWorkspace
from bot.stages.run.verify import verify_candidate
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.journal import Journal
from infrarsi.patches import Effect, PatchSpec
from infrarsi.trial_record import Candidate
from infrarsi.verdict import VerdictKind
from tests.support.tinygpt import infrarsi
from tests.support.repos import commit_tree

pytestmark = pytest.mark.slow
EFFECT = Effect(time_ratio=1.0, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")


@pytest.fixture(scope="module")
def _doctored_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One doctored repo per module (the doctor is most of each test's cost); tests get their own copy."""
    from tests.support.tinygpt import TINY_ARGS, copy_fixture

    repo = copy_fixture(tmp_path_factory.mktemp("doctored") / "tinygpt")
    assert infrarsi("init", str(repo), "--command", f"python train.py {TINY_ARGS}").returncode == 0
    commit_tree(repo, "fixture")
    result = infrarsi("doctor", str(repo), "--repeats", "3", "--run-id", "d")
    assert result.returncode == 0, result.stderr
    return repo


@pytest.fixture
def doctored(_doctored_once: Path, tmp_path: Path) -> Path:
    repo = tmp_path / "tinygpt"
    shutil.copytree(_doctored_once, repo, symlinks=True)
    return repo


def test_doctor_writes_the_report_with_its_pictures(doctored: Path) -> None:
    out = doctored / ".infrarsi" / "runs" / "d"
    report = json.loads((out / "doctor.json").read_text())
    assert report["step_time_s"]["median"] > 0 and report["step_time_s"]["cv"] >= 0
    assert report["mde"]["effect"] > 0 and report["verify_pairs"] >= 4
    assert set(report["phases"]["seconds"]) == {"data", "forward", "backward", "optimizer"}
    assert report["peak_mem_bytes"] > 0
    assert set(report["peak_flops"]) == {"fp32", "bf16"} and all(v > 1e8 for v in report["peak_flops"].values())
    assert 0 < report["mfu"] < 1 and report["mfu_defect"] is None
    assert report["model_flops_source"].startswith("FlopCounterMode")
    # By hand: FlopCounterMode over one real step of the same config, a peak measured here separately.
    flops, peak = _hand_flops_and_peak(doctored)
    assert report["model_flops_per_step"] == pytest.approx(flops, rel=0.01)
    # The MFU is the counted FLOPs over the measured time against the doctor's own fp32 peak, to within 25%;
    # that peak agrees with the one measured separately here to within 2x (two measurements of a shared
    # machine's peak at different moments: CI saw 127 vs 166 GFLOP/s once, with another job running).
    by_hand = flops / report["step_time_s"]["median"] / report["peak_flops"]["fp32"]
    assert 0.75 <= report["mfu"] / by_hand <= 1.25, (report["mfu"], by_hand, report["peak_flops"], peak)
    assert 0.5 <= report["peak_flops"]["fp32"] / peak <= 2.0, (report["peak_flops"], peak)
    assert report["fingerprint"]["cpu_count"] >= 1 and report["fingerprint"]["torch"].startswith("2.")
    assert len(report["loss_band"]["mean"]) == 6 and report["loss_band"]["runs"] == 3
    assert len(report["trials"]) == 3
    markdown = (out / "doctor.md").read_text()
    assert markdown.count("```mermaid") == 2
    assert "xychart-beta" in markdown and "pie showData" in markdown


HAND_COUNT = """
import sys, time, torch
from torch.utils.flop_counter import FlopCounterMode
sys.argv = ["train.py", *sys.argv[1:]]
import harness, train, data
args = train.parse_args(sys.argv[1:])
harness.seed_everything(args.seed)
model = train.build_model(args)
opt = train.build_optimizer(model, args)
x, y = next(data.batches(args.global_batch, args.seq_len, args.vocab_size, args.seed))
micro = data.split_micro_batches(x, y, args.micro_batch)
train.train_step(model, opt, micro, args)
with FlopCounterMode(display=False) as counter:
    train.train_step(model, opt, micro, args)
peak = 0.0
for n in (512, 1024, 2048):
    a, b = torch.randn(n, n), torch.randn(n, n)
    best, started = float("inf"), time.perf_counter()
    while time.perf_counter() - started < 1.0:
        t0 = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t0)
    peak = max(peak, 2 * n**3 / best)
print(counter.get_total_flops(), peak)
"""


def _hand_flops_and_peak(repo: Path) -> tuple[float, float]:
    """FLOPs of one fp32 train_step of the tiny config (counted in a fresh process) and an fp32 matmul peak."""
    import shlex
    import subprocess
    import sys

    from tests.support.tinygpt import TINY_ARGS

    out = subprocess.run([sys.executable, "-c", HAND_COUNT, *shlex.split(TINY_ARGS)], cwd=repo, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    return float(out[0]), float(out[1])


def _ctx(repo: Path, journal: Journal, extra: dict[str, PatchSpec]) -> TrialContext:
    contract = load_contract(repo)
    base = trial_context(contract, read_lock(repo), workspace=GitWorkspace(repo), executor=LocalExecutor(),
                         journal=journal)
    return TrialContext(**{**{f: getattr(base, f) for f in ("contract", "lock", "repo", "executor", "journal",
                                                            "base", "workspace")},
                           "patches": {**base.patches, **extra}})


def _verify(repo: Path, candidate: Candidate, extra: dict[str, PatchSpec], pairs: int = 4):  # noqa: ANN202
    from bot.stages.doctor.baseline import load_doctor

    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        ctx = _ctx(repo, journal, extra)
        doctor = load_doctor(repo, "d")
        assert doctor is not None
        return verify_candidate(ctx, run_id="d", candidate=candidate, doctor=doctor, pairs=pairs)


def _verify_aa(repo: Path):  # noqa: ANN202
    # through the engine: the CLI refuses the baseline as its own candidate (it verifies nothing for a user)
    return _verify(repo, Candidate(), {}, pairs=4)


def test_the_baseline_verified_against_itself_is_not_promoted(doctored: Path) -> None:
    # A/A is promoted at most at rate alpha, by design: with 4 pairs, when the candidate's runs rank
    # below the baseline's with at most one exception (2 of the 70 equally likely rankings, 2.9%).
    # One such draw is luck; a second in a row (1 in 1,200) would mean the verdict leans one way.
    verdict = _verify_aa(doctored)
    if verdict.kind is VerdictKind.PROMOTED:
        assert verdict.comparison is not None and verdict.comparison.p_value < 0.05, verdict.reason
        verdict = _verify_aa(doctored)
    assert verdict.kind is VerdictKind.NOT_SIGNIFICANT, (verdict.kind, verdict.reason, verdict.stop)
    assert len(verdict.baseline_trials) == 4 and len(verdict.candidate_trials) == 4
    refused = infrarsi("verify", str(doctored), "--run-id", "d", "--pairs", "4")
    assert refused.returncode == 2 and "the baseline against itself verifies nothing" in refused.stderr


def _replacement(pid: str, target: str, source: str) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=(target,), effect=EFFECT, kind="replacement",
                     replacement=source)


SCALED_LOSS = _replacement("scale-loss", "model.py::GPT.forward", '''
def forward(self, idx, targets=None):
    x = self.hidden(idx)
    logits = self.lm_head(x)
    if targets is None:
        return logits
    return 0.8 * F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
''')

SKIP_MICRO_BATCHES = _replacement("skip-half", "train.py::train_step", '''
def train_step(model, optimizer, micro_batches, args):
    device_type = torch.device(args.device).type
    kept = micro_batches[::2]
    total = 0.0
    for x, y in kept:
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = model(x, y)
        (loss / len(kept)).backward()
        total += loss.item()
    optimizer.step()
    optimizer.zero_grad()
    return total / len(kept)
''')

HIGHER_LR = _replacement("lr-x10", "train.py::train_step", '''
def train_step(model, optimizer, micro_batches, args):
    device_type = torch.device(args.device).type
    n_micro = len(micro_batches)
    total = 0.0
    for x, y in micro_batches:
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = model(x, y)
        (loss / n_micro).backward()
        total += loss.item()
    for group in optimizer.param_groups:
        group["lr"] *= 10  # the harness sets the schedule; this quietly changes it
    optimizer.step()
    optimizer.zero_grad()
    return total / n_micro
''')

FAKE_CLOCK = _replacement("fake-clock", "train.py::build_model", '''
def build_model(args):
    real = harness.time.perf_counter
    harness.time.perf_counter = lambda: real() / 10.0  # the time module itself: every clock reader is fooled
    if harness.probe is not None:
        harness.probe._clock = harness.time.perf_counter
    config = GPTConfig(vocab_size=args.vocab_size, seq_len=args.seq_len, n_layer=args.n_layer,
                       n_head=args.n_head, d_model=args.d_model, grad_ckpt=bool(args.grad_ckpt))
    model = GPT(config).to(args.device)
    if args.compile:
        model = torch.compile(model)
    return model
''')


# A changed loss or learning rate is caught by whichever check sees it first: the witnessed optimizer settings
# (a learning rate set in the optimizer), the witness's step-1 comparison (loss, gradient norms) when the doctor
# armed it, else the loss band.
COMPUTATION_CHECKS = ("optimizer", "first_step", "loss_band")


@pytest.mark.parametrize("patch,expected", [
    (SCALED_LOSS, COMPUTATION_CHECKS),
    (SKIP_MICRO_BATCHES, ("processed 64 tokens",)),
    (HIGHER_LR, COMPUTATION_CHECKS),
    (FAKE_CLOCK, ("clock",)),
], ids=["scaled-loss", "skipped-micro-batches", "changed-lr", "fake-clock"])
def test_candidates_that_compute_something_else_are_invalid(doctored: Path, patch: PatchSpec,
                                                           expected: tuple[str, ...]) -> None:
    contract = load_contract(doctored)
    verdict = verify_candidate_once(doctored, Candidate.of(contract.defaults(), [patch.id]), {patch.id: patch})
    assert verdict.kind is VerdictKind.INVALID, (verdict.kind, verdict.reason)
    assert any(check in verdict.reason for check in expected), verdict.reason
    assert len(verdict.candidate_trials) == 1  # verification stops at the first broken invariant


def verify_candidate_once(repo: Path, candidate: Candidate, extra: dict[str, PatchSpec]):  # noqa: ANN201
    return _verify(repo, candidate, extra, pairs=4)


def test_a_locked_file_edited_after_the_lock_makes_trials_invalid(doctored: Path) -> None:
    harness = doctored / "harness.py"
    harness.write_text(harness.read_text() + "\n# edited after the lock\n")
    commit_tree(doctored, "fixture")
    contract = load_contract(doctored)
    verdict = verify_candidate_once(doctored, Candidate.of(contract.defaults(), ["fused_gelu"]), {})
    assert verdict.kind is VerdictKind.INVALID
    assert "lock broken before launch: harness.py: locked file changed" in verdict.reason


MID_ARGS = "--n-layer 2 --n-head 4 --d-model 256 --vocab-size 2048 --seq-len 128 --global-batch 8 --steps 8"


@pytest.mark.timing
def test_a_real_speedup_is_promoted(tmp_path: Path) -> None:
    """bf16 autocast on a config where matmuls dominate: AMX makes it several times faster here."""
    from tests.support.tinygpt import copy_fixture

    repo = copy_fixture(tmp_path / "mid")
    assert infrarsi("init", str(repo), "--command", f"python train.py {MID_ARGS}").returncode == 0
    assert infrarsi("doctor", str(repo), "--repeats", "2", "--run-id", "m").returncode == 0
    result = infrarsi("verify", str(repo), "--run-id", "m", "--knob", "dtype=bf16", "--pairs", "5", "--json")
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "promoted", verdict
    assert result.returncode == 0
    assert verdict["ci"][0] > 1.01 and verdict["p_value"] < 0.05
    assert all(i["ok"] for i in verdict["invariants"])
