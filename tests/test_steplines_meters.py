"""Step lines printed through metric meters: pytorch/examples' imagenet ProgressMeter/AverageMeter and
torchvision references' MetricLogger.log_every (DeiT, MAE, DINO). ``init`` drafts a regex from the code;
the job is then run and the regex must read one line per step, with the step and the loss, and none of
the evaluation lines the same meters print."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infrarsi.contract.load import load_contract
from tests.support.repos import git_commit_tree

INFRARSI = [sys.executable, "-m", "bot"]

# The imagenet example's shape, written for this test: meters with a name and a format, a ProgressMeter
# that prints `prefix[ i/N]` and every meter's `name val (avg)`, tab-separated.
PROGRESS = textwrap.dedent('''
    import argparse
    import math
    import torch


    class AverageMeter:
        def __init__(self, name, fmt=":f"):
            self.name, self.fmt = name, fmt
            self.val = self.avg = self.sum = self.count = 0

        def update(self, val, n=1):
            self.val = val
            self.sum += val * n
            self.count += n
            self.avg = self.sum / self.count

        def __str__(self):
            return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)


    class ProgressMeter:
        def __init__(self, num_batches, meters, prefix=""):
            width = len(str(num_batches))
            self.batch_fmtstr = "[{:" + str(width) + "d}/" + str(num_batches) + "]"
            self.meters, self.prefix = meters, prefix

        def display(self, batch):
            entries = [self.prefix + self.batch_fmtstr.format(batch)] + [str(m) for m in self.meters]
            print("\\t".join(entries), flush=True)


    def train(n_batches, model, optimizer, epoch, args):
        batch_time = AverageMeter("Time", ":6.3f")
        losses = AverageMeter("Loss", ":.4e")
        top1 = AverageMeter("Acc@1", ":6.2f")
        progress = ProgressMeter(n_batches, [batch_time, losses, top1], prefix="Epoch: [{}]".format(epoch))
        for i in range(n_batches):
            loss = model(torch.ones(4)).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.update(loss.item(), 4)
            batch_time.update(0.1)
            top1.update(12.5)
            if i % args.print_freq == 0:
                progress.display(i + 1)


    def validate(n_batches, args):
        losses = AverageMeter("Loss", ":.4e")
        progress = ProgressMeter(n_batches, [losses], prefix="Test: ")
        for i in range(n_batches):
            losses.update(2.0 / (i + 1))
            progress.display(i + 1)


    def main():
        p = argparse.ArgumentParser()
        p.add_argument("-b", "--batch-size", default=256, type=int)
        p.add_argument("--epochs", default=90, type=int)
        # 0.1 would zero this loss in one step (1 - 2 * 0.1 * (|x|^2 + 1) = 0) and print 0.0000e+00
        p.add_argument("--lr", default=0.01, type=float)
        p.add_argument("-p", "--print-freq", default=10, type=int)
        p.add_argument("--batches", default=30, type=int)
        args = p.parse_args()
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        for epoch in range(args.epochs):
            train(args.batches, model, optimizer, epoch, args)
            validate(3, args)


    if __name__ == "__main__":
        main()
''')

# torchvision references' shape: a MetricLogger whose log_every wraps the loader and prints
# `header  [ i/N]  eta: ...  name: median (global avg)  ...` every print_freq iterations.
METRIC_LOGGER = textwrap.dedent('''
    import torch


    class SmoothedValue:
        def __init__(self):
            self.values = []

        def update(self, v):
            self.values.append(v)

        def __str__(self):
            window = sorted(self.values[-20:])
            return "{:.4f} ({:.4f})".format(window[len(window) // 2], sum(self.values) / len(self.values))


    class MetricLogger:
        def __init__(self, delimiter="  "):
            self.meters, self.delimiter = {}, delimiter

        def update(self, **kwargs):
            for k, v in kwargs.items():
                self.meters.setdefault(k, SmoothedValue()).update(v)

        def log_every(self, iterable, print_freq, header=""):
            n = len(iterable)
            width = len(str(n))
            for i, obj in enumerate(iterable):
                yield obj
                if i % print_freq == 0 or i == n - 1:
                    meters = self.delimiter.join(f"{k}: {v}" for k, v in self.meters.items())
                    print(self.delimiter.join([header, f"[{i:{width}d}/{n}]", "eta: 0:00:01", meters,
                                               "time: 0.1000"]), flush=True)
''')

ENGINE = textwrap.dedent('''
    import torch

    import utils


    def train_one_epoch(model, data_loader, optimizer, epoch, print_freq=10):
        metric_logger = utils.MetricLogger(delimiter="  ")
        header = f"Epoch: [{epoch}]"
        for x in metric_logger.log_every(data_loader, print_freq, header):
            loss = model(x).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            metric_logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])


    @torch.no_grad()
    def evaluate(model, data_loader):
        metric_logger = utils.MetricLogger(delimiter="  ")
        header = "Test:"
        for x in metric_logger.log_every(data_loader, 10, header):
            metric_logger.update(loss=model(x).sum().item())
''')

MAIN = textwrap.dedent('''
    import argparse
    import torch
    from engine import evaluate, train_one_epoch


    def main():
        p = argparse.ArgumentParser()
        p.add_argument("--batch_size", default=64, type=int)
        p.add_argument("--epochs", default=300, type=int)
        p.add_argument("--lr", default=5e-4, type=float)
        p.add_argument("--print_freq", default=10, type=int)
        args = p.parse_args()
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        loader = [torch.full((4,), float(i)) / 30 for i in range(30)]
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer, epoch, args.print_freq)
            evaluate(model, loader[:3])


    if __name__ == "__main__":
        main()
''')


def _repo(tmp_path: Path, files: dict[str, str], command: str) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    git_commit_tree(root, "job")
    out = subprocess.run(INFRARSI + ["init", str(root), "--command", command], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return root


def _read(root: Path) -> list[tuple[int, float]]:
    """Run the job as the contract says (1 epoch is plenty) and read its lines with the drafted regex."""
    contract = load_contract(root)
    argv = [sys.executable, *contract.workload.command[1:], *contract.workload.args]
    argv[argv.index("--epochs") + 1] = "1"
    out = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    regex = re.compile(contract.timing.stdout_regex)
    return [(int(m["step"]), float(m["loss"])) for ln in out.stdout.splitlines() if (m := regex.search(ln))]


@pytest.mark.parametrize("positional", [False, True])
def test_the_imagenet_progress_meter_is_read_one_line_per_step_and_never_the_test_lines(tmp_path: Path,
                                                                                      positional: bool) -> None:
    source = PROGRESS.replace(', prefix="Epoch', ', "Epoch').replace(', prefix="Test', ', "Test') if positional \
        else PROGRESS
    root = _repo(tmp_path, {"main.py": source}, "python main.py -b 256 --epochs 2")
    contract = load_contract(root)
    assert contract.workload.args[-2:] == ("--print-freq", "1")  # printing every step changes no computation
    steps = _read(root)
    assert [s for s, _ in steps] == list(range(1, 31))  # 30 training lines; the 3 `Test: ` lines are not steps
    assert all(loss > 0 for _, loss in steps)
    # what the job trains and builds is editable, though no function is named build_/step
    assert set(contract.scope.editable) >= {"main.py::train", "main.py::main"}


@pytest.mark.parametrize("freq,every", [("", 1), ("--print_freq 5", 5)])
def test_the_metric_logger_is_read_with_its_interval_and_never_the_test_lines(tmp_path: Path, freq: str,
                                                                               every: int) -> None:
    root = _repo(tmp_path, {"main.py": MAIN, "engine.py": ENGINE, "utils.py": METRIC_LOGGER},
                 f"python main.py --batch_size 64 --epochs 2 {freq}".strip())
    contract = load_contract(root)
    assert contract.timing.steps_per_line == every
    steps = _read(root)
    want = [i for i in range(30) if i % every == 0 or i == 29]
    assert [s for s, _ in steps] == want


def test_a_batch_written_into_the_training_loader_counts_samples(tmp_path: Path) -> None:
    # kuangliu/pytorch-cifar: no batch setting, `batch_size=128` in the train loader, 100 in the test one
    job = textwrap.dedent('''
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", default=0.1, type=float)
        args = parser.parse_args()
        trainset = list(range(1000))
        testloader = torch.utils.data.DataLoader(trainset, batch_size=100, shuffle=False, num_workers=2)
        trainloader = torch.utils.data.DataLoader(trainset, batch_size=128, shuffle=True, num_workers=2)
        for batch_idx, x in enumerate(trainloader):
            print(f"step {batch_idx} loss {1.0 / (batch_idx + 1):.4f}")
    ''')
    root = _repo(tmp_path, {"main.py": job}, "python main.py --lr 0.1")
    assert load_contract(root).workload.tokens_per_step == 128
