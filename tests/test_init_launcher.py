"""`infrarsi init` on a command that starts with torchrun: the launcher's options become `[launch]`, the script
and its arguments the workload, and the parallel layout settings (Megatron-LM's `--tensor-model-parallel-size`,
DeepSpeed's `zero_stage`) become knobs whose levels divide the world size; launchers that do more than place
ranks are refused in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.stages.init.launcher import LaunchError, split_launcher
from infrarsi.search.design_columns import derived_features
from infrarsi.contract.load import load_contract
from tests.support.repos import git_commit_tree

INFRARSI = [sys.executable, "-m", "bot"]

# Megatron-LM's pretrain_gpt.py flags, trimmed to what init reads (the job never runs here).
MEGATRON_LIKE = textwrap.dedent('''
    import argparse

    def main():
        p = argparse.ArgumentParser()
        p.add_argument("--tensor-model-parallel-size", type=int, default=1)
        p.add_argument("--pipeline-model-parallel-size", type=int, default=1)
        p.add_argument("--expert-model-parallel-size", type=int, default=1)
        p.add_argument("--zero-stage", type=int, default=1)
        p.add_argument("--micro-batch-size", type=int, default=1)
        p.add_argument("--global-batch-size", type=int, default=256)
        p.add_argument("--seq-length", type=int, default=4096)
        p.add_argument("--train-iters", type=int, default=500000)
        p.add_argument("--num-experts", type=int, default=8)
        p.add_argument("--lr", type=float, default=3e-4)
        args = p.parse_args()
        for step in range(args.train_iters):
            print(f"step {step} | loss 1.0")

    if __name__ == "__main__":
        main()
''')


def _init(tmp_path: Path, command: str) -> tuple[subprocess.CompletedProcess, Path]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pretrain_gpt.py").write_text(MEGATRON_LIKE)
    git_commit_tree(root, "job")
    out = subprocess.run(INFRARSI + ["init", str(root), "--command", command], capture_output=True, text=True)
    return out, root


def test_a_torchrun_command_becomes_the_launch_and_the_layout_settings_become_knobs(tmp_path: Path) -> None:
    out, root = _init(tmp_path, "torchrun --nnodes=2 --nproc-per-node 8 --rdzv-endpoint head:29400 "
                                "pretrain_gpt.py --tensor-model-parallel-size 2 --zero-stage 1 "
                                "--global-batch-size 256 --seq-length 4096 --train-iters 500000")
    assert out.returncode == 0, out.stderr
    contract = load_contract(root)
    launch = contract.launch
    assert (launch.executor, launch.nproc_per_node, launch.nnodes, launch.rdzv_endpoint) == \
        ("torchrun", 8, 2, "head:29400")
    assert contract.workload.command == ("python", "pretrain_gpt.py")
    assert "--nnodes=2" not in contract.workload.args and "--global-batch-size" in contract.workload.args
    knobs = {k.name: k for k in contract.knobs}
    assert knobs["tensor_model_parallel_size"].values == (1, 2, 4, 8)  # within a node of 8
    assert knobs["tensor_model_parallel_size"].default == 2  # the command's own value
    assert knobs["pipeline_model_parallel_size"].values == (1, 2, 4, 8, 16)  # dividing the world of 16
    assert knobs["expert_model_parallel_size"].values == (1, 2, 4, 8, 16)
    assert knobs["zero_stage"].values == (0, 1, 2, 3) and knobs["zero_stage"].default == 1
    assert "--tensor-model-parallel-size" not in contract.workload.args  # a knob's value comes from the contract
    text = (root / "infrarsi.toml").read_text()
    assert "tensor-parallel degree (powers of two up to the 8 ranks of a node)" in text
    # the run stage prices these layouts: the bubble, groups that leave a node, the ZeRO states
    names = {f.name for f in derived_features(contract.knobs, contract.constraints, launch.world_size,
                                              launch.ranks_per_node, contract.workload.args)}
    assert {"pipeline_bubble", "off_node:ep", "model_states"} <= names, names
    assert "off_node:tp" not in names  # no level of tp leaves a node


def test_one_process_offers_no_layout_and_python_m_torch_distributed_run_is_torchrun(tmp_path: Path) -> None:
    out, root = _init(tmp_path, "python -m torch.distributed.run --nproc_per_node=1 pretrain_gpt.py "
                                "--train-iters 500000")
    assert out.returncode == 0, out.stderr
    contract = load_contract(root)
    assert contract.launch.executor == "torchrun" and contract.launch.world_size == 1
    assert not {"tensor_model_parallel_size", "zero_stage"} & {k.name for k in contract.knobs}
    assert "the command runs one process, so nothing to lay out" in (root / "infrarsi.toml").read_text()


@pytest.mark.parametrize("command, says", [
    ("deepspeed --num_gpus 8 pretrain_gpt.py", "deepspeed: DeepSpeed's launcher passes --local_rank"),
    ("accelerate launch --num_processes 8 pretrain_gpt.py", "accelerate: Accelerate's launcher also sets"),
    ("torchrun --nnodes 1:4 --nproc-per-node 8 pretrain_gpt.py", "--nnodes 1:4: an elastic range"),
    ("torchrun --nproc-per-node gpu pretrain_gpt.py", "--nproc_per_node gpu: give the number of processes"),
    ("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py", "--nnodes 2 without --rdzv-endpoint"),
    ("python -m torch.distributed.launch --nproc_per_node 2 pretrain_gpt.py", "passes --local_rank to the script"),
    ("torchrun --nproc-per-node 2 -m megatron.train", "--module/--no-python starts something other than a script"),
])
def test_a_launcher_init_cannot_express_is_one_line_naming_it(tmp_path: Path, command: str, says: str) -> None:
    out, root = _init(tmp_path, command)
    assert out.returncode != 0 and not (root / "infrarsi.toml").exists()
    err = out.stderr.strip()
    assert says in err and "\n" not in err and "Traceback" not in err, err


def test_the_launchers_options_are_read_in_either_spelling() -> None:
    launch, rest = split_launcher(["torchrun", "--standalone", "--nproc_per_node", "4", "--master-addr=10.0.0.1",
                                   "--max-restarts", "0", "train.py", "--lr", "1"])
    assert launch is not None and launch.table == {"executor": "torchrun", "nproc_per_node": 4}
    assert rest == ["python", "train.py", "--lr", "1"]
    assert split_launcher(["python", "train.py"]) == (None, ["python", "train.py"])
    launch, _ = split_launcher(["/usr/bin/torchrun", "--nnodes", "2", "--nproc-per-node=8", "--node-rank", "1",
                                "--master_addr", "h", "--master_port", "6000", "t.py"])
    assert launch is not None and launch.table["rdzv_endpoint"] == "h:6000" and launch.table["node_rank"] == 1
    assert launch.world_size == 16 and launch.ranks_per_node == 8
    with pytest.raises(LaunchError, match="no training script"):
        split_launcher(["torchrun", "--nproc-per-node", "2"])


def test_a_model_drafting_the_contract_gets_the_script_and_the_launch_is_read_from_the_command(
        tmp_path: Path) -> None:
    """With ``--proposer anthropic`` a model drafts the workload; what the launcher (and the shell around it:
    its folder, its environment) says is not left to it."""
    from bot.stages.init.proposed_draft import draft_with
    from bot.stages.init.scan import scan_repo
    from infrarsi.seams.proposer import ContractProposal

    class Drafting:  # the proposer seam as a model answers it: a workload, and a launch of its own guessing
        name, model = "anthropic", "claude-test"

        def __init__(self) -> None:
            self.commands: list[str] = []

        def draft_contract(self, command, summary, *, tokens_per_step=None):  # noqa: ANN001, ANN201
            self.commands.append(command)
            return ContractProposal(data={"workload": {"command": ["python", "train.py"], "args": []},
                                          "launch": {"executor": "local"}},
                                    rationale={"workload.command": "the entry script"}, proposer=self.name)

    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_text("print('step 1 loss 1.0')\n")
    model = Drafting()
    draft = draft_with(model, "cd job && OMP_NUM_THREADS=1 torchrun --nproc-per-node=4 train.py --lr 1",
                       scan_repo(tmp_path, "job/train.py"))
    assert model.commands == ["python train.py --lr 1"]
    assert draft.data["launch"] == {"executor": "torchrun", "nproc_per_node": 4}
    assert draft.notes["workload.command"] == "claude-test: the entry script"
    assert draft.notes["launch.nproc_per_node"].startswith("from the command: torchrun")
    assert draft.data["workload"]["workdir"] == "job" and draft.data["workload"]["env"] == {"OMP_NUM_THREADS": "1"}
