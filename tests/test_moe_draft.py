"""``init`` says whether the micro-batch is part of an MoE task: with an expert capacity it is (another split drops
other tokens), and the split knobs are pinned in the workload; without one it is not, and they stay knobs."""

from __future__ import annotations

import shutil
from pathlib import Path

from bot.stages.init.moe_draft import moe_note, read_moe, split_knob_names
from tests.support.init_draft import drafted
from tests.support.tinygpt import REPO, infrarsi


def test_the_settings_say_experts_top_k_and_a_capacity() -> None:
    task = read_moe({"n_exp": 8, "top_k": 2, "capacity_factor": 1.25, "micro_batch_size": 4})
    assert task is not None and task.experts == 8 and task.top_k == 2 and task.micro_batch_in_task
    assert task.capacity == ("capacity_factor", 1.25)
    free = read_moe({"n_experts": 16, "top_k": 2, "capacity_factor": 0.0})
    assert free is not None and not free.micro_batch_in_task
    assert read_moe({"n_layer": 4, "batch_size": 8}) is None
    assert read_moe({"num_experts": 1}) is None


def test_the_note_names_the_capacity_and_what_stays_fixed() -> None:
    task = read_moe({"n_exp": 8, "top_k": 2, "capacity_factor": 1.25})
    split = split_knob_names({"micro_batch_size": {}, "threads": {}}, [])
    assert split == ["micro_batch_size"]
    note = moe_note(task, split)  # type: ignore[arg-type]
    assert note.startswith("the micro-batch is part of this MoE task (8 experts, top-2): capacity_factor = 1.25")
    assert "micro_batch_size stays fixed in workload.args" in note
    free = read_moe({"n_exp": 8, "capacity_factor": 0})
    assert moe_note(free, ["micro_batch"]).startswith("the micro-batch is not part of this MoE task")  # type: ignore[arg-type]


def test_init_on_capmoe_pins_the_micro_batch_and_marks_the_workload(tmp_path: Path) -> None:
    repo = tmp_path / "capmoe"
    shutil.copytree(REPO / "fixtures" / "capmoe", repo, ignore=shutil.ignore_patterns("__pycache__"))
    result = infrarsi("init", str(repo), "--command", "python train.py --train-iters 100000")
    assert result.returncode == 0, result.stderr
    assert "init: the micro-batch is part of this MoE task (8 experts, top-2): capacity_factor = 1.25" \
        in result.stdout, result.stdout
    toml = (repo / "infrarsi.toml").read_text()
    assert 'family = "moe"' in toml and "experts = 8" in toml and "top_k = 2" in toml
    assert 'args = ["--train-iters", "100000", "--micro-batch-size", "4"]' in toml
    assert "[knobs.micro_batch_size]" not in toml and "tokens_per_step = 1024" in toml


NANOGPT_ARGS = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--block-size", type=int, default=64)
p.add_argument("--batch-size", type=int, default=4)
p.add_argument("--gradient-accumulation-steps", type=int, default=4)
p.add_argument("--max-iters", type=int, default=100)
args = p.parse_args()
for it in range(args.max_iters):
    print(f"iter {it}: loss {1.0:.4f}")
"""


def test_a_coupled_micro_batch_pair_counts_the_accumulation_in_tokens_per_step(tmp_path: Path) -> None:
    """nanoGPT-style argparse (``--batch-size`` per micro-batch beside ``--gradient-accumulation-steps``): the
    global batch is their product, not the micro-batch (init drafted 256 tokens for dropgpt's 1,024)."""
    draft = drafted(tmp_path, NANOGPT_ARGS)
    assert draft.data["workload"]["tokens_per_step"] == 4 * 4 * 64
    assert "--gradient-accumulation-steps" in draft.notes["workload.tokens_per_step"]
