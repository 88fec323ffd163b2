"""Which clock times a job (issue 47): its printed lines when they come every step or every few steps, the bot's
own step clock (``timing.source = "optimizer"``) when they are sparse or carry an evaluation; ``check --run`` says
which and why."""

from __future__ import annotations

from pathlib import Path

from bot.stages.init.dryrun import clock_line, dry_run
from infrarsi.seams.executor import Execution
from tests.support.init_draft import FakeExecutor, drafted_contract, steps

# a tutorial GPT: hard-coded globals, a line only every eval_interval iterations, after an evaluation
EVAL_ONLY = '''import torch
batch_size = 16
block_size = 32
max_iters = 5000
eval_interval = 500
eval_iters = 200


def estimate_loss():
    return {"train": 1.0, "val": 1.0}


for iter in range(max_iters):
    if iter % eval_interval == 0 or iter == max_iters - 1:
        losses = estimate_loss()
        print(f"step {iter}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    loss = torch.ones(()).requires_grad_()
    loss.backward()
'''
# research code that logs only at eval: the training loss, printed after the evaluation in the same branch
AFTER_EVAL = '''import argparse
p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int, default=8)
p.add_argument("--seq_len", type=int, default=64)
p.add_argument("--steps", type=int, default=100000)
args = p.parse_args()


def evaluate():
    return 0.5


for step in range(args.steps):
    loss = 1.0
    if step % 5 == 0:
        acc = evaluate()
        print(f"step {step} loss {loss:.4f} acc {acc:.3f}")
'''
# hard-coded and sparse, nothing evaluated: a line every 100 steps the command cannot change
SPARSE = '''BATCH_SIZE = 4
SEQ_LEN = 128
NUM_BATCHES = 100000
PRINT_EVERY = 100
for i in range(NUM_BATCHES):
    loss = 1.0
    if i % PRINT_EVERY == 0:
        print(f"step {i} loss {loss:.4f}")
'''
# the same with a few steps a line: the printed line is the clock, its interval the steps per line
DENSE = SPARSE.replace("PRINT_EVERY = 100", "PRINT_EVERY = 5")


def test_a_job_that_prints_only_with_its_evaluations_is_timed_by_the_bots_own_clock(tmp_path: Path) -> None:
    contract = drafted_contract(tmp_path / "a", EVAL_ONLY)
    timing = contract.timing
    assert timing.source == "optimizer" and timing.stdout_regex is None and timing.steps_per_line == 1
    assert (timing.warmup_steps, timing.measured_steps) == (2, 12)  # optimizer steps, then the job is ended
    line = clock_line(contract)
    assert line.startswith("clock: the bot's own step clock (timing.source = \"optimizer\"")
    assert "every 500 optimizer steps (eval_interval), after estimate_loss()" in line


def test_a_step_line_printed_after_an_evaluation_is_not_a_clock(tmp_path: Path) -> None:
    contract = drafted_contract(tmp_path / "b", AFTER_EVAL)
    assert contract.timing.source == "optimizer"
    assert "printed after an evaluation (evaluate())" in clock_line(contract)


def test_sparse_lines_use_the_bots_clock_and_dense_ones_their_interval(tmp_path: Path) -> None:
    sparse = drafted_contract(tmp_path / "c", SPARSE)
    assert sparse.timing.source == "optimizer"
    assert "comes every 100 optimizer steps (PRINT_EVERY)" in clock_line(sparse)
    dense = drafted_contract(tmp_path / "d", DENSE)
    assert dense.timing.source == "stdout" and dense.timing.steps_per_line == 5  # the interval variable's value
    assert clock_line(dense).startswith("clock: the job's printed lines (timing.source = \"stdout\"), 5 optimizer "
                                        "steps per line")


def test_check_run_counts_the_bots_step_events(tmp_path: Path) -> None:
    contract = drafted_contract(tmp_path / "e", EVAL_ONLY)
    executor = FakeExecutor(Execution(events=steps(14), returncode=-15, wall_s=3.0, peak_rss_bytes=0,
                                      stopped_after_steps=True))
    result = dry_run(contract, executor=executor, log_dir=tmp_path / "logs")
    assert result.ok and result.message.startswith("ok: the bot's own step clock saw 14 optimizer steps")
    spec = executor.specs[0]
    assert spec.source == "optimizer" and spec.step_tokens == contract.workload.tokens_per_step == 16 * 32
    short = FakeExecutor(Execution(events=steps(3), returncode=0, wall_s=3.0, peak_rss_bytes=0))
    assert not dry_run(contract, executor=short, log_dir=tmp_path / "logs").ok
