"""llm.c's `train_gpt2.py` conventions: a global batch counted in tokens (`--total_batch_size`, "in units
of #tokens") with accumulation derived from the per-forward `--batch_size`, and 0/1 ints as toggles
(`--compile 0`, `--flash 0`, `--tensorcores 0`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infrarsi.contract.load import load_contract
from tests.support.repos import git_commit_tree

INFRARSI = [sys.executable, "-m", "bot"]

JOB = textwrap.dedent('''
    import argparse
    import torch

    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch_size", type=int, default=4, help="batch size, in units of #batch dimensions")
        parser.add_argument("--sequence_length", type=int, default=64, help="sequence length")
        parser.add_argument("--total_batch_size", type=int, default=256, help="total desired batch size, in units of #tokens")
        parser.add_argument("--num_iterations", type=int, default=10, help="number of iterations to run")
        parser.add_argument("--learning_rate", type=float, default=1e-4)
        parser.add_argument("--compile", type=int, default=0, help="torch.compile the model")
        parser.add_argument("--flash", type=int, default=0, help="use flash attention")
        parser.add_argument("--tensorcores", type=int, default=0, help="use tensorcores")
        parser.add_argument("--dtype", type=str, default="float32", help="float32|float16|bfloat16")
        args = parser.parse_args()
        B, T = args.batch_size, args.sequence_length
        assert args.total_batch_size % (B * T) == 0
        grad_accum_steps = args.total_batch_size // (B * T)
        model = torch.nn.Linear(T, T)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        for step in range(args.num_iterations):
            for micro_step in range(grad_accum_steps):
                loss = model(torch.ones(B, T)).pow(2).mean() / grad_accum_steps
                loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            print(f"step {step+1:4d}/{args.num_iterations} | train loss {loss.item():.6f} | norm 1.0")

    if __name__ == "__main__":
        main()
''')


def _init(tmp_path: Path, command: str, source: str | None = None) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train_gpt2.py").write_text(JOB if source is None else source)
    git_commit_tree(root, "job")
    out = subprocess.run(INFRARSI + ["init", str(root), "--command", command], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return root


@pytest.mark.parametrize("total,batch,values", [(1024, 4, (1, 2, 4, 8, 16)), (256, 4, (1, 2, 4))])
def test_a_token_sized_global_batch_fixes_the_tokens_and_frees_the_forward_batch(
        tmp_path: Path, total: int, batch: int, values: tuple[int, ...]) -> None:
    root = _init(tmp_path, f"python train_gpt2.py --batch_size {batch} --sequence_length 64 "
                           f"--total_batch_size {total} --num_iterations 100")
    contract = load_contract(root)
    assert contract.workload.tokens_per_step == total  # not batch x sequence length
    knobs = {k.name: k for k in contract.knobs}
    assert knobs["batch_size"].values == values and knobs["batch_size"].default == batch
    assert "--total_batch_size" in contract.workload.args and "--batch_size" not in contract.workload.args
    # every offered batch runs the same global batch: the job's own assertion holds for each
    for v in values:
        assert total % (v * 64) == 0


def test_zero_one_ints_are_toggles(tmp_path: Path) -> None:
    root = _init(tmp_path, "python train_gpt2.py --num_iterations 100")
    knobs = {k.name: k for k in load_contract(root).knobs}
    for name in ("compile", "flash", "tensorcores"):
        assert knobs[name].values == (0, 1) and knobs[name].default == 0


CONSTANTS = textwrap.dedent('''
    import torch

    total_batch_size = 4096 # 2**12, in number of tokens
    B = 4 # micro batch size
    T = 64 # sequence length
    grad_accum_steps = total_batch_size // (B * T)
    use_compile = False
    max_steps = 19073

    model = torch.nn.Linear(T, T)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
    for step in range(max_steps):
        for micro_step in range(grad_accum_steps):
            loss = model(torch.ones(B, T)).pow(2).mean()
            loss.backward()
        optimizer.step()
        print(f"step {step:5d} | loss: {loss.item():.6f} | dt: 1.00ms")
''')


def test_a_script_configured_by_constants_in_its_code_gets_a_contract(tmp_path: Path) -> None:
    # karpathy/build-nanogpt's train_gpt2.py: no parser; the batch is a constant "in number of tokens"
    root = _init(tmp_path, "python train_gpt2.py", CONSTANTS)
    contract = load_contract(root)
    assert contract.workload.tokens_per_step == 4096
    assert contract.knobs == ()  # a constant is changed by a patch, never by a launch flag
    assert "use_compile (torch.compile; passed as a literal in the code)" in (root / "infrarsi.toml").read_text()
    assert contract.timing.measured_steps == 12  # a job configured for 19,073 steps is ended after them


def test_a_micro_batch_of_one_is_not_a_toggle() -> None:
    # `trainer.micro_batch_size=1` (a Hydra override, so the knob tables decide its domain): a count,
    # where 0 would be no batch at all; `trainer.compile=0` beside it is a toggle
    from bot.stages.init.classify import classify
    from bot.stages.init.setting import Setting
    from bot.stages.init.knob_entries import plan_knobs

    settings = [Setting(key=f"trainer.{k}", convention="hydra", passing="hydra", token=f"trainer.{k}", default=v,
                        has_default=True, type="int") for k, v in (("micro_batch_size", 1), ("compile", 0))]
    plan = plan_knobs(classify(settings, {}), {}, taken=set())
    assert plan.knobs["trainer_compile"]["values"] == [0, 1]
    assert "trainer_micro_batch_size" not in plan.knobs
    assert any(d.startswith("trainer.micro_batch_size") for d in plan.deferred)


def test_the_schedule_and_data_functions_beside_a_model_stay_locked(tmp_path: Path) -> None:
    # build-nanogpt's train_gpt2.py: GPT classes, then get_lr and load_tokens beside them; nanoGPT-style
    # single files have get_batch there too. They decide what the job computes, not how fast: all run, only
    # the model and its builder are editable, the others are named as locked with why.
    job = CONSTANTS.replace("import torch\n", textwrap.dedent('''
        import torch


        class MLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(8, 8)

            def forward(self, x):
                return self.fc(x)


        def load_tokens(filename):
            return torch.zeros(16, dtype=torch.long)


        def get_lr(it):
            return 6e-4 * min(1.0, (it + 1) / 10)


        def get_batch():
            return torch.ones(2, 8)


        def configure_model():
            return MLP()
    '''), 1).replace("model = torch.nn.Linear(T, T)", "model = configure_model()\nlr, data = get_lr(0), load_tokens('x')")
    job = job.replace("model(torch.ones(B, T))", "model(get_batch())")
    root = _init(tmp_path, "python train_gpt2.py", job)
    editable = set(load_contract(root).scope.editable)
    assert {"train_gpt2.py::MLP", "train_gpt2.py::configure_model"} <= editable
    assert not {"train_gpt2.py::load_tokens", "train_gpt2.py::get_lr", "train_gpt2.py::get_batch"} & editable
    text = (root / "infrarsi.toml").read_text()
    assert "train_gpt2.py::get_lr: schedules the learning rate" in text
    assert "train_gpt2.py::load_tokens: builds or splits the dataset" in text
