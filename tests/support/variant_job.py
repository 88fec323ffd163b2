"""A job whose step time a test decides: a ``variant`` knob picks how long each step sleeps, and every run counts
itself in a file outside the repository, so the "machine" can slow down after a given number of runs.
Real training nonetheless (a torch model, an optimizer, a loss the witness counts targets of)."""

from __future__ import annotations

from pathlib import Path

from tests.support.tinygpt import infrarsi
from tests.support.repos import init_repo

TRUE = {"a": 1.0, "b": 0.85, "c": 0.7, "d": 0.92, "e": 1.0}  # the variants' step times at full speed, relative

JOB = '''"""A job whose step time is its variant's, times the machine's speed (slower after --slow-after runs)."""
import argparse, os, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--variant", default="a")
p.add_argument("--steps", type=int, default=100)
p.add_argument("--runs-file", required=True)
p.add_argument("--slow-after", type=int, required=True)
args = p.parse_args()
with open(args.runs_file, "a") as f:
    f.write("run\\n")
with open(args.runs_file) as f:
    runs = len(f.read().split())
machine = 1.3 if runs > args.slow_after else 1.0
true = %r[args.variant]
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, args.steps + 1):
    time.sleep(0.06 * true * machine)
    loss = torch.nn.functional.mse_loss(model(torch.ones(2, 4)), torch.zeros(2, 4))
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
''' % (TRUE,)

CONTRACT = '''version = 1

[workload]
command = "python train.py"
args = "--steps 100 --runs-file {runs} --slow-after {slow_after}"
tokens_per_step = 2

[timing]
warmup_steps = 1
measured_steps = 5
source = "stdout"
stdout_regex = '^step (?P<step>\\d+) loss (?P<loss>\\S+)'

[scope]
editable = ["train.py"]
locked = []

[knobs.variant]
kind = "categorical"
values = ["a", "b", "c", "d", "e"]
default = "a"
flag = "--variant"

[budget]
trials = 6
trial_timeout_s = 120

[verify]
top_k = 1
max_pairs = {max_pairs}
'''




def variant_repo(dest: Path, *, slow_after: int = 10_000, max_pairs: int = 8) -> Path:
    """The job with its contract, locked and committed; the machine slows by 30% after ``slow_after`` runs."""
    repo = dest / "job"
    init_repo(repo, {"train.py": JOB, ".gitignore": ".infrarsi/\n",
                     "infrarsi.toml": CONTRACT.format(runs=dest / "runs.txt", slow_after=slow_after,
                                                      max_pairs=max_pairs)})
    assert infrarsi("lock", str(repo)).returncode == 0
    return repo
