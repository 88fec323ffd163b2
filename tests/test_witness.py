"""The witness in a real interpreter: injected through sitecustomize, counting, and locked against the job.

Each test launches a few-line PyTorch script (never importing infrarsi) through
the local executor with the witness on, as verification does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.executors.local import LocalExecutor
from bot.executors.witness import PAYLOAD, payload_sha256
from infrarsi.seams.executor import TrialSpec

pytestmark = [pytest.mark.slow, pytest.mark.side_by_side]  # its checks time nothing: CI runs it beside other tests (./dev)

TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
{before}
for step in range(3):
    loss = model(torch.ones(2, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _run(tmp_path: Path, before: str = "", witness: int | None = 2):
    (tmp_path / "job.py").write_text(TRAIN.format(before=before))
    spec = TrialSpec(argv=(sys.executable, "job.py"), cwd=str(tmp_path), timeout_s=120, witness=witness)
    return LocalExecutor().execute(spec)


def test_the_witness_counts_a_step_of_a_script_that_never_imports_the_bot(tmp_path: Path) -> None:
    ex = _run(tmp_path)
    assert ex.returncode == 0 and ex.witness_error is None, ex.stderr_tail
    w = ex.witness
    # Step 2: forward addmm 2·(2·8·4) = 128 FLOPs, weight gradient mm 128 (the input needs no gradient).
    assert w["flops"] == 256 and w["flops_by_op"] == {"aten.addmm": 128, "aten.mm": 128}
    assert w["optimizer_steps"] == 3 and w["params"] == 2 and w["param_elements"] == 36
    assert all(g is not None and g > 0 for g in w["grad_norms"]) and w["matmul_dtypes"] == ["float32"]
    assert len(w["update_proj"]) == 2 and w["source_sha256"] == payload_sha256()


def test_without_the_witness_nothing_is_injected(tmp_path: Path) -> None:
    ex = _run(tmp_path, before="import sys; assert 'sitecustomize' not in sys.modules or "
                                "'infrarsi' not in str(getattr(sys.modules['sitecustomize'], '__file__', ''))",
              witness=None)
    assert ex.returncode == 0 and ex.witness is None and ex.witness_error is None, ex.stderr_tail


@pytest.mark.parametrize("before, error", [
    ("import torch.optim.optimizer as o; o._global_optimizer_post_hooks.clear()", "post-hook was removed"),
    ("import torch.utils.flop_counter as f; f.FlopCounterMode = type('F', (), {})", "FlopCounterMode was replaced"),
    ("import time; time.perf_counter = lambda: 0.0", "time.perf_counter was replaced"),
    ("import atexit; atexit._clear()", "wrote no report"),
    ("import os\nfor fd in range(3, 64):\n    try: os.write(fd, b'{\"witness\": \"{}\", \"mac\": \"0\"}\\n')\n"
     "    except OSError: pass", "failed authentication"),
    ("import os; os.environ.get('INFRARSI_WITNESS') and os._exit(1)", None),
])
def test_a_job_that_disables_patches_or_spoofs_the_witness_is_caught(tmp_path: Path, before: str,
                                                                       error: str | None) -> None:
    ex = _run(tmp_path, before=before)
    if error is None:  # the variable is gone before the job's first line: nothing to find
        assert ex.returncode == 0 and ex.witness_error is None, ex.stderr_tail
        return
    assert ex.witness_error is not None and error in ex.witness_error, (ex.witness_error, ex.stderr_tail)


def test_the_payload_is_what_the_bot_ships() -> None:
    assert PAYLOAD.name == "sitecustomize.py" and PAYLOAD.parent.name == "site"
    assert len(payload_sha256()) == 64


FOREVER = """
import time
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for line in range(1, 10**9):  # a real job is configured for days
    loss = model(torch.ones(2, 8)).sum()
    loss.backward()
    if line % {every} == 0:
        opt.step()
        opt.zero_grad()
    print(f"step {{line}} loss {{loss.item():.4f}}", flush=True)
    time.sleep(0.02)
"""


@pytest.mark.parametrize("every", [1, 10**6], ids=["a-step-per-line", "no-step-before-the-stop"])
def test_a_job_the_bot_stops_after_its_measured_steps_still_reports(tmp_path: Path, every: int) -> None:
    """Every line an optimizer step: the report comes at the end of the last measured step. No optimizer step
    by the time the bot stops the job (lines per micro-batch, say): the report comes on the bot's SIGTERM."""
    (tmp_path / "job.py").write_text(FOREVER.format(every=every))
    spec = TrialSpec(argv=(sys.executable, "job.py"), cwd=str(tmp_path), timeout_s=120, witness=2, source="stdout",
                     stdout_regex=r"^step (?P<step>\d+) loss (?P<loss>\S+)", expected_steps=6)
    ex = LocalExecutor().execute(spec)
    assert ex.stopped_after_steps and ex.wall_s < 60, (ex.wall_s, ex.stderr_tail)
    assert ex.witness_error is None and ex.witness is not None, ex.stderr_tail
    assert ex.witness["tampered"] == []
    if every == 1:
        assert ex.witness["optimizer_steps"] == 6 and ex.witness["flops"] == 256 and ex.witness["at"] == "step"
    else:
        assert ex.witness["optimizer_steps"] == 0 and ex.witness["flops"] is None and ex.witness["at"] == "sigterm"


@pytest.mark.parametrize("witness", [2, None])
def test_a_witnessed_job_that_compiles_draws_dropout_from_torchs_own_random_stream(tmp_path: Path,
                                                                                    witness: int | None) -> None:
    """Inductor's own generator would give a compiled step other dropout masks than the eager baseline's, and an
    honest torch.compile would read invalid on a model with dropout: the witness turns ``fallback_random`` on
    when the job imports inductor's config, and only in a witnessed run (the timed runs keep inductor's)."""
    probe = ("import torch._inductor.config as c\n"
             f"assert c.fallback_random is {witness is not None}, c.fallback_random")
    ex = _run(tmp_path, before=probe, witness=witness)
    assert ex.returncode == 0, ex.stderr_tail
    assert (ex.witness is not None) is (witness is not None) and ex.witness_error is None


HAND = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
for step in range(1, 10**9):  # no torch.optim: a hand-written SGD update, the word-language-model example's
    {top}
    loss = model(torch.ones(2, 8)).pow(2).sum()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.01)
    {end}
"""


@pytest.mark.parametrize("top, end, flops", [
    ("model.zero_grad()", "", 352),  # the step ends at zero_grad(): forward, backward, update
    ("", "for p in model.parameters(): p.grad = None", 192),  # seen at the next backward(): its forward is not
    ("", "for p in model.parameters(): p.grad.zero_()", 192),
], ids=["zero_grad", "grad-none", "grad-zeroed"])
def test_the_bots_step_clock_and_the_witness_see_a_hand_written_update(tmp_path: Path, top: str, end: str,
                                                                       flops: int) -> None:
    """No torch.optim optimizer: each group of backward() calls ended by the update (the gradients cleared) is an
    optimizer step, for the bot's own step clock and for the witness alike."""
    (tmp_path / "job.py").write_text(HAND.format(top=top, end=end))
    spec = TrialSpec(argv=(sys.executable, "job.py"), cwd=str(tmp_path), timeout_s=120, witness=3,
                     source="optimizer", step_tokens=16, expected_steps=6)
    ex = LocalExecutor().execute(spec)
    assert ex.stopped_after_steps and ex.witness_error is None, (ex.witness_error, ex.stderr_tail)
    assert len(ex.events) >= 6 and {e.tokens for e in ex.events} == {16} and [e.step for e in ex.events[:3]] == [1, 2, 3]
    assert all(e.loss is not None and e.loss > 0 for e in ex.events)
    w = ex.witness
    assert w["steps_by"] == "hand" and w["optimizer_steps"] == 6 and w["at"] == "step" and w["tampered"] == []
    assert (w["params"], w["param_elements"]) == (4, 46) and all(g and g > 0 for g in w["grad_norms"])
    assert w["flops"] == flops and len(w["step_t"]) == 6 and w["backward_loss"][0] == pytest.approx(ex.events[0].loss)
    assert any(abs(u) > 0 for u in w["update_proj"])  # the weights moved: the update is seen


def test_the_bots_step_clock_on_a_torch_optim_job_and_nothing_without_it(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(FOREVER.format(every=2).replace("time.sleep(0.02)", ""))
    spec = TrialSpec(argv=(sys.executable, "job.py"), cwd=str(tmp_path), timeout_s=120, witness=2,
                     source="optimizer", step_tokens=8, expected_steps=4)
    ex = LocalExecutor().execute(spec)
    assert ex.stopped_after_steps and ex.witness_error is None, ex.stderr_tail
    assert len(ex.events) >= 4 and ex.witness["steps_by"] == "optimizer" and ex.witness["optimizer_steps"] == 4
    # the printed lines (two a step) are not steps of this clock, and the job's own probe steps are not either
    assert [e.step for e in ex.events[:4]] == [1, 2, 3, 4]
