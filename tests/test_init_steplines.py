"""Step lines found, not guessed: a table of real-world step-line formats -> the regex init derives.

Each row is a print/logging call written the way a public training repo writes it
(re-typed from memory of the pattern, not copied), and a line that call prints.
Sources of the formats:
  karpathy/nanoGPT train.py (f-string ``iter N: loss X, time ..``, and its eval line that must be skipped);
  karpathy/minGPT projects/chargpt (``iter_dt ..ms; iter N: train loss X``);
  karpathy/llm.c train_gpt2.py and build-nanogpt (pipe-separated ``step N/M | train loss X | norm``);
  pytorch/examples mnist (``.format`` ``Train Epoch: E [a/b (p%)]\\tLoss: X``);
  pytorch/examples word_language_model (``| epoch E | b/n batches | lr | ms/batch | loss X | ppl``);
  pytorch tutorials quickstart (``loss: X  [  b/  n]``);
  huggingface/transformers Trainer (the ``{'loss': .., 'epoch': ..}`` dict lines);
  Lightning's TQDM progress bar (``self.log("train_loss", .., prog_bar=True)``);
  tqdm ``set_postfix(loss=..)`` and ``set_description(f"loss {..}")`` loops;
  huggingface/pytorch-image-models train.py (``_logger.info(f'Train: E [..]  Loss: X (avg)..')``);
  pytorch/torchtitan train.py (``logger.info(f"{color}step: N  {color}loss: X ..")``);
  Lightning-AI/litgpt pretrain (``fabric.print(f"Epoch .. | iter N step M | loss train: X, val: ..")`` — an
  eval value in the line: skipped), mindspore-style callbacks (``print("epoch: {}, step: {}, loss is {}")``);
  plain ``logging.info("step %d loss %.4f", ..)`` and ``print("step", i, "loss", loss.item())``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.stages.init.dryrun import no_step_line_message
from bot.stages.init.steplines import find_step_lines, regex_for_lines

# (name, source, a line it prints, loss in that line, step in that line or None, stream)
FORMATS = [
    ("nanogpt", '''
while True:
    if iter_num % eval_interval == 0:
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    lossf = loss.item() * gradient_accumulation_steps
    print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")
''', "iter 12: loss 4.1826, time 310.25ms, mfu -100.00%", 4.1826, 12, "stdout"),
    ("mingpt", '''
def batch_end_callback(trainer):
    for _ in range(1):
        print(f"iter_dt {trainer.iter_dt * 1000:.2f}ms; iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}")
''', "iter_dt 7797.46ms; iter 2: train loss 2.60938", 2.60938, 2, "stdout"),
    ("llm.c", '''
for step in range(num_iterations + 1):
    print0(f"step {step+1:4d}/{num_iterations} | train loss {lossf:.6f} | norm {norm:.4f} | lr {lr:.2e} | ({(t1-t0)*1000:.2f} ms | {tokens_per_second:.0f} tok/s)")
''', "step    3/50 | train loss 5.970921 | norm 6.1982 | lr 1.00e-04 | (412.31 ms | 9935 tok/s)", 5.970921, 3,
     "stdout"),
    ("build-nanogpt", '''
for step in range(max_steps):
    if master_process:
        print(f"step {step:5d} | loss {loss_accum.item():.6f} | lr {lr:.4e} | norm: {norm:.4f} | dt: {dt*1000:.2f}ms | tok/sec: {tokens_per_sec:.2f}")
''', "step    17 | loss 6.112345 | lr 1.0000e-04 | norm: 0.9876 | dt: 330.12ms | tok/sec: 1588.20", 6.112345, 17,
     "stdout"),
    ("mnist", '''
def train(args, model, device, train_loader, optimizer, epoch):
    for batch_idx, (data, target) in enumerate(train_loader):
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
''', "Train Epoch: 1 [640/60000 (1%)]\tLoss: 1.304851", 1.304851, None, "stdout"),
    ("word_language_model", '''
def train():
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        if batch % args.log_interval == 0 and batch > 0:
            print('| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | '
                    'loss {:5.2f} | ppl {:8.2f}'.format(
                epoch, batch, len(train_data) // args.bptt, lr,
                elapsed * 1000 / args.log_interval, cur_loss, math.exp(cur_loss)))
''', "| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 11.43 | loss  7.64 | ppl  2079.22", 7.64, 200,
     "stdout"),
    ("pytorch-quickstart", '''
def train_loop(dataloader, model, loss_fn, optimizer):
    for batch, (X, y) in enumerate(dataloader):
        if batch % 100 == 0:
            loss, current = loss.item(), batch * batch_size + len(X)
            print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")
''', "loss: 2.301385  [   64/60000]", 2.301385, None, "stdout"),
    ("hf-trainer", '''
from transformers import Trainer, TrainingArguments
trainer = Trainer(model=model, args=training_args, train_dataset=ds)
trainer.train()
''', "{'loss': 10.8231, 'grad_norm': 3.21, 'learning_rate': 4.9e-05, 'epoch': 0.02}", 10.8231, None, "stdout"),
    ("lightning-bar", '''
import lightning as L
class LitModel(L.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self.model(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss
''', "Epoch 0:  45%|████▌     | 45/100 [00:01<00:01, 31.02it/s, v_num=0, train_loss=2.310]", 2.310, 45, "stdout"),
    ("tqdm-postfix", '''
from tqdm import tqdm
pbar = tqdm(range(steps))
for step in pbar:
    pbar.set_postfix(loss=loss.item(), lr=lr)
''', "  7%|▋         | 7/100 [00:02<00:30,  3.05it/s, loss=3.41, lr=0.0003]", 3.41, 7, "stderr"),
    ("tqdm-description", '''
from tqdm import tqdm
pbar = tqdm(loader)
for batch in pbar:
    pbar.set_description(f"train loss {loss.item():.4f}")
''', "train loss 2.9911:  12%|█▏        | 12/100 [00:01<00:09,  9.10it/s]", 2.9911, 12, "stderr"),
    ("timm", '''
def train_one_epoch(epoch, model, loader):
    for batch_idx, (input, target) in enumerate(loader):
        if last_batch or batch_idx % args.log_interval == 0:
            _logger.info(
                f'Train: {epoch} [{update_idx:>4d}/{updates_per_epoch} '
                f'({100. * update_idx / (updates_per_epoch - 1):>3.0f}%)]  '
                f'Loss: {losses_m.val:#.3g} ({losses_m.avg:#.3g})  '
                f'LR: {lr:.3e}  '
            )
''', "INFO:train:Train: 0 [  50/1251 (  4%)]  Loss: 6.89 (6.91)  LR: 1.000e-05  ", 6.89, 50, "stderr"),
    ("torchtitan", '''
def train():
    while step < job_config.training.steps:
        logger.info(
            f"{color.red}step: {step:2}  "
            f"{color.green}loss: {global_avg_loss:7.4f}  "
            f"{color.yellow}memory: {device_mem_stats.max_reserved_gib:5.2f}GiB"
        )
''', "[rank0]:2024-06-01 12:00:01,234 - root - INFO - \x1b[31mstep:  7  \x1b[32mloss:  9.1234  \x1b[33mmemory: "
     "12.50GiB", 9.1234, 7, "stderr"),
    ("logging-percent", '''
import logging
logger = logging.getLogger(__name__)
for step in range(100):
    logger.info("step %d loss %.4f lr %.2e", step, loss.item(), lr)
''', "2025-01-01 10:00:00 INFO __main__ step 5 loss 3.1416 lr 1.00e-03", 3.1416, 5, "stderr"),
    ("logging-stdout", '''
import logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.INFO)
for it in range(100):
    logging.info("it=%d train_loss=%.5f", it, loss)
''', "INFO:root:it=9 train_loss=2.71828", 2.71828, 9, "stdout"),
    ("print-args", '''
for i in range(steps):
    print("step", i, "loss", loss.item())
''', "step 3 loss 0.693147", 0.693147, 3, "stdout"),
    ("mindspore-style", '''
class LossCallBack:
    def step_end(self, run_context):
        for _ in range(1):
            print("epoch: {}, step: {}, loss is {}".format(epoch_num, cur_step, loss))
''', "epoch: 1, step: 20, loss is 4.2", 4.2, 20, "stdout"),
    ("tensor-loss", '''
for step in range(10):
    print(f"step {step} loss {loss}")
''', "step 4 loss tensor(1.2500, grad_fn=<NllLossBackward0>)", 1.25, 4, "stdout"),
]


@pytest.mark.parametrize("name,source,line,loss,step,stream", FORMATS, ids=[f[0] for f in FORMATS])
def test_step_line_found(name: str, source: str, line: str, loss: float, step: int | None, stream: str) -> None:
    found = find_step_lines(textwrap.dedent(source))
    assert found, f"{name}: no step line found"
    best = found[0]
    m = re.search(best.regex, line)
    assert m, f"{name}: {best.regex!r} does not match {line!r}"
    assert float(m.group("loss")) == pytest.approx(loss)
    if step is not None:
        assert int(m.group("step")) == step
    assert best.stream == stream


def test_formats_table_is_large_enough() -> None:
    assert len(FORMATS) >= 15


def test_eval_line_alone_is_not_a_step_line() -> None:
    src = 'for s in range(3):\n    print(f"step {s}: train loss {l["train"]:.4f}, val loss {l["val"]:.4f}")\n'
    assert find_step_lines(src) == []


def test_regex_from_lines_for_pipe_separated_fields() -> None:
    lines = [f"| epoch 1 | {b:5d}/ 2983 batches | lr 20.00 | loss {7 - b / 1000:5.2f} | ppl 100.0"
             for b in (200, 400, 600)] + ["| end of epoch 1 | valid loss 5.53 |"]
    regex = regex_for_lines(lines)
    assert regex is not None
    hits = [re.search(regex, ln) for ln in lines]
    assert [bool(h) for h in hits] == [True, True, True, False]
    assert hits[1] is not None and float(hits[1].group("loss")) == pytest.approx(6.6)
    assert hits[1].group("step") == "400"


# Scripts with no usable step line: what the dry run says, with the lines it saw.
NO_LINE_SCRIPTS = {
    "wandb-only": "import sys\nfor i in range(4):\n    print(f'logged to wandb: run abc step')\n",
    "eval-only": "for e in range(3):\n    print(f'epoch {e} val loss {1.0/(e+1):.3f}')\n",
    "silent": "x = sum(range(100))\n",
    "accuracy-only": "for i in range(4):\n    print(f'step {i} acc {0.5 + i/10:.2f}')\n",
    "final-only": "total = 0\nfor i in range(4):\n    total += i\nprint('training done, final loss 0.1')\n",
}


@pytest.mark.parametrize("name", sorted(NO_LINE_SCRIPTS))
def test_no_usable_line_message(tmp_path: Path, name: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(NO_LINE_SCRIPTS[name])
    assert find_step_lines(script.read_text()) == [] or name == "final-only"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    message = no_step_line_message(lines, regex=r"step (?P<step>\d+) loss (?P<loss>\S+)", seen=0, expected=8)
    assert "saw 0 step lines, expected 8" in message
    for ln in lines[-5:]:
        assert ln in message
    if not lines:
        assert "printed nothing" in message
    assert regex_for_lines(lines) is None
    assert "no line carries a training loss" in message


def test_dry_run_prints_the_lines_and_a_regex_that_fits(tmp_path: Path) -> None:
    from bot.executors.local import LocalExecutor
    from bot.stages.init.dryrun import dry_run
    from infrarsi.contract.load import load_contract

    (tmp_path / "train.py").write_text(
        "for b in range(1, 9):\n    print(f'| epoch 1 | {b:4d}/ 100 batches | loss {5 - b / 10:5.2f} | ppl 9.0')\n")
    (tmp_path / "infrarsi.toml").write_text(textwrap.dedent('''
        version = 1
        [workload]
        command = ["python", "train.py"]
        tokens_per_step = 8
        [timing]
        source = "stdout"
        stdout_regex = 'step\\s+(?P<step>\\d+).*?loss[\\s:=|]+(?P<loss>[-+0-9.eE]+)'
        warmup_steps = 2
        measured_steps = 4
    '''))
    contract = load_contract(tmp_path)
    result = dry_run(contract, executor=LocalExecutor(), log_dir=tmp_path / "logs")
    assert not result.ok and result.seen == 0
    assert "| epoch 1 |    8/ 100 batches | loss  4.20 | ppl 9.0" in result.message
    assert result.suggested_regex is not None
    hits = [re.search(result.suggested_regex, f"| epoch 1 | {b:4d}/ 100 batches | loss {5 - b / 10:5.2f} | ppl 9.0")
            for b in (3, 4)]
    assert all(hits) and [h.group("step") for h in hits if h] == ["3", "4"]
