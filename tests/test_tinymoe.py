"""The tinymoe fixture: real trials, the grouped-experts patch on them, and the capacity factor that drops tokens.
The grouped-experts codemod itself: test_codemods_experts.py."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import psutil
import pytest

from bot.executors.local import LocalExecutor
from bot.patching.audit import audit_tree
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import load_contract
from infrarsi.seams.executor import TrialSpec
from infrarsi.measure import classify, summarize
from infrarsi.trial_record import Outcome
from tests.support.tinygpt import REPO, infrarsi

pytestmark = pytest.mark.side_by_side  # its checks time nothing: CI runs it beside other tests (./dev)

TINYMOE = REPO / "fixtures" / "tinymoe"
TINY_ARGS = ("--n-layer 1 --n-head 2 --d-model 32 --n-experts 4 --top-k 2 --d-expert 32 --capacity-factor 0 "
             "--aux-loss-coef 0.01 --vocab-size 128 --seq-len 16 --global-batch 4 --steps 8 --seed 1234 --lr 6e-4")
TINY_TOKENS = 4 * 16


def make_repo(dest: Path, *, args: str = TINY_ARGS, tokens: int = TINY_TOKENS, knobs_extra: str = "",
              git: bool = True) -> Path:
    """A copy of tinymoe whose contract runs ``args``, locked and (optionally) committed."""
    repo = dest / "tinymoe"
    shutil.copytree(TINYMOE, repo, ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.lock"))
    toml = (repo / "infrarsi.toml").read_text()
    toml = re.sub(r'^args = ".*"$', f'args = "{args}"', toml, count=1, flags=re.M)
    toml = re.sub(r"^tokens_per_step = \d+$", f"tokens_per_step = {tokens}", toml, count=1, flags=re.M)
    toml = toml.replace("value = 16\n", "value = 4\n").replace("values = [1, 2, 4, 8, 16]", "values = [1, 2, 4]")
    toml = toml.replace("default = 4\nflag = \"--micro-batch\"", "default = 2\nflag = \"--micro-batch\"")
    (repo / "infrarsi.toml").write_text(toml + knobs_extra)
    result = infrarsi("lock", str(repo))
    assert result.returncode == 0, result.stderr
    if git:
        from tests.support.repos import commit_tree

        commit_tree(repo, "tinymoe with its contract")
    return repo


def trial(repo: Path, *args: str) -> dict:
    result = infrarsi("trial", str(repo), "--json", *args, timeout=600)
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


# -- the capacity factor: locked by the contract ---------------------------------------------------

def test_the_contract_locks_the_capacity_factor(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, git=False)
    toml = (repo / "infrarsi.toml").read_text()
    (repo / "infrarsi.toml").write_text(toml + '\n[knobs.capacity]\nkind = "float"\nvalues = [0.0, 1.0]\n'
                                        'default = 0.0\nflag = "--capacity-factor"\n')
    with pytest.raises(ContractError) as err:
        load_contract(repo)
    assert err.value.key == "knobs.capacity.flag" and "infrarsi.toml" in str(err.value)

    contract = load_contract(make_repo(tmp_path / "b", git=False))
    before = {"model.py": (TINYMOE / "model.py").read_bytes()}
    after = {"model.py": before["model.py"].replace(b"capacity = math.ceil(self.capacity_factor",
                                                    b"capacity = math.ceil(1.0")}
    audit = audit_tree(before, after, editable=contract.scope.editable, locked=contract.scope.locked,
                       allow_imports=False)
    assert not audit.ok
    assert "MoE.route" in " ".join(str(v) for v in audit.violations)


# -- real trials ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_trial_reports_times_memory_loss_and_grouped_experts_keep_the_loss(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    base = trial(repo)
    assert base["outcome"] == "ok", base
    assert base["tokens_per_step"] == TINY_TOKENS
    assert len(base["step_times_s"]) == 6 and base["step_time_s"] > 0
    assert base["peak_mem_bytes"] > 50 * 2**20
    assert len(base["loss"]) == 6
    grouped = trial(repo, "--patch", "grouped_experts")
    assert grouped["outcome"] == "ok", grouped
    contract = load_contract(repo)
    for a, b in zip(base["loss"], grouped["loss"]):
        assert b == pytest.approx(a, rel=contract.loss.rtol)
    assert grouped["loss"][-1] == pytest.approx(base["loss"][-1], rel=contract.loss.final_rtol)


@pytest.mark.slow
def test_a_capacity_that_drops_tokens_is_caught(tmp_path: Path) -> None:
    """A sloppy contract that exposes the capacity as a knob: the trial is invalid (fewer tokens), its loss moves."""
    knob = '\n[knobs.capacity]\nkind = "float"\nvalues = [0.0, 1.0]\ndefault = 0.0\nflag = "--capacity-factor"\n'
    repo = make_repo(tmp_path, args=TINY_ARGS.replace(" --capacity-factor 0", ""), knobs_extra=knob, git=False)
    base = trial(repo)
    assert base["outcome"] == "ok", base
    dropped = trial(repo, "--knob", "capacity=1.0")
    assert dropped["outcome"] == "invalid"
    assert re.search(r"processed \d+ tokens; the contract fixes 64 per step", dropped["reason"]), dropped["reason"]
    assert dropped["tokens_per_step"] < TINY_TOKENS
    assert any(abs(a - b) > 1e-4 * abs(a) for a, b in zip(base["loss"], dropped["loss"]))


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["crash", "hang"])
def test_a_crashing_or_hanging_moe_job_ends_the_trial_and_leaves_nothing(tmp_path: Path, failure: str) -> None:
    repo = make_repo(tmp_path, git=False)
    train = repo / "train.py"
    inject = ('    if getattr(args, "_calls", 0) >= 2:\n'
              + ('        raise RuntimeError("expert weights exploded")\n' if failure == "crash"
                 else '        harness.time.sleep(600)\n')
              + '    args._calls = getattr(args, "_calls", 0) + 1\n')
    source = train.read_text().replace('    """One optimizer step over the global batch, accumulating gradients '
                                       'over micro-batches."""\n', '    """One optimizer step."""\n' + inject)
    train.write_text(source)
    spec = TrialSpec(argv=(sys.executable, "train.py", *TINY_ARGS.split()), cwd=str(repo),
                     timeout_s=300 if failure == "crash" else 20)  # a hang: any timeout passes (steps may be 0)
    ex = LocalExecutor().execute(spec)
    metrics = summarize(ex, warmup=2, measured=6)
    outcome, reason = classify(ex, metrics, warmup=2, measured=6, tokens_per_step=TINY_TOKENS)
    if failure == "crash":
        assert outcome is Outcome.CRASH and "expert weights exploded" in reason
    else:
        assert outcome is Outcome.TIMEOUT
    steps = [e.step for e in ex.events]
    assert steps == [1, 2] if failure == "crash" else steps == [1, 2][:len(steps)]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                               for p in ex.pids):
        time.sleep(0.1)
    assert not [p for p in ex.pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
