"""Knob discovery over the config conventions real training repos use: found free / fixed / coupled.

Each row is a small entry script written the way its kind of repo is written
(argparse; HfArgumentParser + TrainingArguments; nanoGPT-style globals with a
configurator; Hydra YAML trees; Lightning Trainer literals and LightningCLI;
click; typer; environment variables). Discovery is static: nothing is imported.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.stages.init.classify import classify
from bot.stages.init.discover import discover
from bot.stages.init.knob_entries import infer_tokens, plan_knobs
from infrarsi.contract.entry import given_values

ARGPARSE = '''
import argparse
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=3e-4)
p.add_argument("--batch_size", type=int, default=32)
p.add_argument("--grad_accum", type=int, default=4)
p.add_argument("--seq_len", type=int, default=128)
p.add_argument("--dropout", type=float, default=0.1)
p.add_argument("--bf16", action="store_true")
p.add_argument("--num_workers", type=int, default=2)
p.add_argument("--out_dir", default="out")
'''

HF = '''
from dataclasses import dataclass, field
from transformers import HfArgumentParser, TrainingArguments, Trainer

@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")

@dataclass
class DataArguments:
    dataset_name: str = field(default="wikitext")
    block_size: int = field(default=128)

parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
'''

GLOBALS = '''
out_dir = 'out'
batch_size = 12
gradient_accumulation_steps = 5 * 8
block_size = 1024
n_layer = 12
dropout = 0.0
learning_rate = 6e-4
max_iters = 600000
compile = True
dtype = 'bfloat16'
exec(open('configurator.py').read())
'''

HYDRA = '''
import hydra

@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg):
    pass
'''
HYDRA_CONF = {
    "conf/config.yaml": "defaults:\n  - model: small\n  - _self_\nseed: 1\ntrainer:\n  precision: bf16\n"
                        "  micro_batch_size: 4\n  accumulation_steps: 8\n  lr: 0.001\n  max_steps: 100\n"
                        "data:\n  seq_len: 256\n  num_workers: 4\n",
    "conf/model/small.yaml": "n_layer: 4\nd_model: 256\ndropout: 0.1\n",
}

LIGHTNING = '''
import lightning as L
trainer = L.Trainer(max_steps=1000, precision="bf16-mixed", accumulate_grad_batches=2, gradient_clip_val=1.0,
                    benchmark=True)
'''

LIGHTNING_CLI = '''
import lightning as L
from lightning.pytorch.cli import LightningCLI

class LitModel(L.LightningModule):
    def __init__(self, lr: float = 1e-3, hidden: int = 64, label_smoothing: float = 0.1):
        super().__init__()

class Data(L.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 4, seq_len: int = 128):
        super().__init__()

LightningCLI(LitModel, Data)
'''

CLICK = '''
import click

@click.command()
@click.option("--learning-rate", default=1e-3, type=float)
@click.option("--epochs", default=3, type=int)
@click.option("--num-workers", default=2, type=int)
@click.option("--compile/--no-compile", default=False)
def main(learning_rate, epochs, num_workers, compile):
    pass
'''

TYPER = '''
import typer

def main(seed: int = 0, max_steps: int = 100, gradient_checkpointing: bool = False,
         num_threads: int = typer.Option(4, "--num-threads")):
    pass

if __name__ == "__main__":
    typer.run(main)
'''

ENV = '''
import os
seed = int(os.environ.get("SEED", "0"))
workers = int(os.getenv("NUM_WORKERS", 2))
precision = os.environ.get("PRECISION", "float32")
rank = int(os.environ.get("RANK", 0))
lr = float(os.environ["LR"])
'''

# karpathy/minGPT's projects/chargpt: a CfgNode tree built in code, groups from the repo's own classes,
# overridden by `--trainer.batch_size=32` (merge_from_args)
CFGNODE = '''
import sys
from mingpt.trainer import Trainer
from mingpt.utils import CfgNode as CN

def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 3407
    C.data = CharDataset.get_default_config()
    C.trainer = Trainer.get_default_config()
    C.trainer.learning_rate = 5e-4
    return C

class CharDataset:
    @staticmethod
    def get_default_config():
        C = CN()
        C.block_size = 128
        return C

if __name__ == '__main__':
    config = get_config()
    config.merge_from_args(sys.argv[1:])
'''
CFGNODE_TRAINER = '''
from mingpt.utils import CfgNode as CN

class Trainer:
    @staticmethod
    def get_default_config():
        C = CN()
        C.num_workers = 4
        C.max_iters = None
        C.batch_size = 64
        C.learning_rate = 3e-4
        return C
'''

# lucidrains/x-transformers' train_enwik8.py: python-fire over a function's keyword parameters
FIRE = '''
import fire

def train(
    num_batches = int(1e5),
    batch_size = 4,
    gradient_accumulate_every = 4,
    learning_rate = 1e-4,
    seq_len = 1024,
    cpu = False
):
    for i in range(num_batches):
        print(f'training loss: {1.0}')

if __name__ == '__main__':
    fire.Fire(train)
'''

# convention -> (source, extra files, command args, expected {"free", "fixed", "coupled"} (subsets))
TABLE = {
    "argparse": (ARGPARSE, {}, [], {
        "free": {"bf16", "num_workers"}, "fixed": {"lr", "seq_len", "dropout"},
        "coupled": {"batch_size*grad_accum"}}),
    "hf-training-arguments": (HF, {}, ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "4"], {
        "free": {"bf16", "fp16", "tf32", "torch_compile", "gradient_checkpointing", "optim",
                 "dataloader_num_workers"},
        "fixed": {"learning_rate", "max_steps", "seed", "model_name_or_path", "dataset_name", "block_size",
                  "label_smoothing_factor", "weight_decay"},
        "coupled": {"per_device_train_batch_size*gradient_accumulation_steps"}}),
    "globals-configurator": (GLOBALS, {}, ["--batch_size=16"], {
        "free": {"compile", "dtype"}, "fixed": {"block_size", "n_layer", "dropout", "learning_rate", "max_iters"},
        "coupled": {"batch_size*gradient_accumulation_steps"}}),
    "hydra": (HYDRA, HYDRA_CONF, ["trainer.max_steps=50"], {
        "free": {"trainer.precision", "data.num_workers"},
        "fixed": {"seed", "trainer.lr", "trainer.max_steps", "data.seq_len", "model.n_layer", "model.d_model",
                  "model.dropout"},
        "coupled": {"trainer.micro_batch_size*trainer.accumulation_steps"}}),
    "lightning-trainer": (LIGHTNING, {}, [], {
        "free": {"precision", "benchmark"}, "fixed": {"max_steps", "gradient_clip_val"}, "coupled": set()}),
    "lightning-cli": (LIGHTNING_CLI, {}, [], {
        "free": {"trainer.precision", "data.num_workers"},
        "fixed": {"model.lr", "model.label_smoothing", "data.seq_len", "trainer.max_steps"},
        "coupled": {"data.batch_size*trainer.accumulate_grad_batches"}}),
    "click": (CLICK, {}, [], {
        "free": {"compile", "num_workers"}, "fixed": {"learning_rate", "epochs"}, "coupled": set()}),
    "typer": (TYPER, {}, [], {
        "free": {"gradient_checkpointing", "num_threads"}, "fixed": {"seed", "max_steps"}, "coupled": set()}),
    "cfgnode": (CFGNODE, {"mingpt/__init__.py": "", "mingpt/trainer.py": CFGNODE_TRAINER}, [], {
        "free": {"trainer.num_workers"},
        "fixed": {"system.seed", "data.block_size", "trainer.learning_rate", "trainer.max_iters"},
        "coupled": set()}),
    "fire": (FIRE, {}, ["--num_batches=100000"], {
        "free": set(), "fixed": {"num_batches", "learning_rate", "seq_len"},
        "coupled": {"batch_size*gradient_accumulate_every"}}),
    "env": (ENV, {}, [], {
        "free": {"NUM_WORKERS", "PRECISION"}, "fixed": {"SEED", "LR"}, "coupled": set()}),
}


def _repo(tmp_path: Path, source: str, extra: dict[str, str]) -> Path:
    (tmp_path / "train.py").write_text(textwrap.dedent(source))
    for rel, text in extra.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


@pytest.mark.parametrize("convention", sorted(TABLE))
def test_discovery_table(tmp_path: Path, convention: str) -> None:
    source, extra, args, expected = TABLE[convention]
    settings = discover(_repo(tmp_path, source, extra), "train.py")
    found = classify(settings, given_values(args)).names()
    free, fixed, coupled = set(found["free"]), set(found["fixed"]), set(found["coupled"])
    assert expected["free"] <= free, (convention, free)
    assert expected["fixed"] <= fixed, (convention, fixed)
    assert coupled == expected["coupled"], (convention, coupled)
    assert not (free & fixed)
    # a task-defining value is never offered as a free knob
    task_words = ("lr", "learning_rate", "seed", "max_steps", "max_iters", "dropout", "label_smoothing", "seq_len",
                  "block_size", "n_layer", "epochs")
    assert not [f for f in free if f.split(".")[-1].lower() in task_words]


def test_runtime_launcher_variables_are_not_settings(tmp_path: Path) -> None:
    settings = discover(_repo(tmp_path, ENV, {}), "train.py")
    assert "RANK" not in {s.key for s in settings}


def test_passing_styles(tmp_path: Path) -> None:
    cases = {"argparse": (ARGPARSE, {}, "bf16", "switch", "--bf16"),
             "globals": (GLOBALS, {}, "compile", "flag-equals", "--compile"),
             "hydra": (HYDRA, HYDRA_CONF, "trainer.precision", "hydra", "trainer.precision"),
             "lightning-cli": (LIGHTNING_CLI, {}, "trainer.precision", "flag-space", "--trainer.precision"),
             "click": (CLICK, {}, "num_workers", "flag-space", "--num-workers"),
             "env": (ENV, {}, "NUM_WORKERS", "env", "NUM_WORKERS")}
    for name, (source, extra, key, passing, token) in cases.items():
        root = tmp_path / name
        root.mkdir()
        s = next(s for s in discover(_repo(root, source, extra), "train.py") if s.key == key)
        assert (s.passing, s.token) == (passing, token), name


def test_coupled_pair_becomes_a_product_constraint_and_tokens(tmp_path: Path) -> None:
    settings = discover(_repo(tmp_path, HF, {}), "train.py")
    given = given_values(["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "4"])
    classified = classify(settings, given)
    plan = plan_knobs(classified, given, taken=set())
    assert plan.knobs["per_device_train_batch_size"]["values"] == [1, 2, 4, 8, 16, 32]
    assert [c for c in plan.constraints if c["kind"] == "product"] == [
        {"kind": "product", "knobs": ["per_device_train_batch_size", "gradient_accumulation_steps"], "value": 32,
         "reason": "micro-batch x gradient accumulation = the fixed global batch"}]
    assert "learning_rate" not in plan.knobs and "max_steps" not in plan.knobs
    tokens = infer_tokens(settings, classified, given)
    assert tokens is not None and tokens[0] == 32 * 128


@pytest.mark.parametrize("convention, source, args, micro, accum", [
    ("configurator --key=value", "GLOBALS", ["--batch_size=16"], "batch_size", "gradient_accumulation_steps"),
])
def test_a_coupled_pair_passed_as_key_equals_value_is_drafted_as_knobs(tmp_path: Path, convention: str,
                                                                        source: str, args: list[str], micro: str,
                                                                        accum: str) -> None:
    """nanoGPT-style jobs tune micro-batch x accumulation like any other: the pair is the first lever."""
    settings = discover(_repo(tmp_path, globals()[source], {}), "train.py")
    given = given_values(args)
    plan = plan_knobs(classify(settings, given), given, taken=set())
    assert plan.knobs[micro]["form"] == plan.knobs[accum]["form"] == "equals", convention
    assert plan.knobs[micro]["default"] == 16 and 16 in plan.knobs[micro]["values"]
    [product] = plan.constraints
    assert product["kind"] == "product" and product["knobs"] == [micro, accum]
    assert not any(micro in d for d in plan.deferred)


def test_globals_tokens_from_arithmetic_defaults(tmp_path: Path) -> None:
    settings = discover(_repo(tmp_path, GLOBALS, {}), "train.py")
    given = given_values(["--batch_size=16"])
    tokens = infer_tokens(settings, classify(settings, given), given)
    assert tokens is not None and tokens[0] == 16 * 40 * 1024


def test_draft_reads_a_log_interval_as_steps_per_line(tmp_path: Path) -> None:
    from bot.stages.init.draft import draft_contract
    from bot.stages.init.scan import scan_repo

    source = GLOBALS.replace("exec(", "log_interval = 10\nexec(") + textwrap.dedent('''
        iter_num = 0
        while True:
            if iter_num % log_interval == 0:
                print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms")
    ''')
    root = _repo(tmp_path, source, {})
    # the user chose the interval: a line stands for 10 optimizer steps
    draft = draft_contract("python train.py --max_iters=2000 --log_interval=10", scan_repo(root, "train.py"))
    timing = draft.data["timing"]
    assert timing["steps_per_line"] == 10
    assert (timing["warmup_steps"], timing["measured_steps"]) == (2, 12)
    assert draft.data["workload"]["tokens_per_step"] == 12 * 40 * 1024
    # the script's default: the bot asks for a line every step, which changes no computation
    draft = draft_contract("python train.py --max_iters=2000", scan_repo(root, "train.py"))
    assert draft.data["timing"].get("steps_per_line", 1) == 1
    assert draft.data["workload"]["args"][-1] == "--log_interval=1"


def test_an_argparse_log_interval_is_set_to_one_on_the_command(tmp_path: Path) -> None:
    # pytorch/examples word_language_model: `--log-interval` 200, the line counts batches within an epoch
    from bot.stages.init.draft import draft_contract
    from bot.stages.init.scan import scan_repo

    source = textwrap.dedent('''
        import argparse, math
        parser = argparse.ArgumentParser()
        parser.add_argument('--batch_size', type=int, default=20)
        parser.add_argument('--bptt', type=int, default=35)
        parser.add_argument('--epochs', type=int, default=40)
        parser.add_argument('--log-interval', type=int, default=200)
        args = parser.parse_args()
        epoch, lr, total_loss = 1, 20.0, 0.0
        for batch in range(1000):
            total_loss += 5.0
            if batch % args.log_interval == 0 and batch > 0:
                cur_loss = total_loss / args.log_interval
                print('| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | '
                      'loss {:5.2f} | ppl {:8.2f}'.format(epoch, batch, 1000, lr, 3.1, cur_loss, math.exp(cur_loss)))
                total_loss = 0
    ''')
    draft = draft_contract("python train.py --epochs 6", scan_repo(_repo(tmp_path, source, {}), "train.py"))
    assert draft.data["workload"]["args"] == ["--epochs", "6", "--log-interval", "1"]
    assert draft.data["timing"].get("steps_per_line", 1) == 1
    assert draft.data["workload"]["tokens_per_step"] == 20 * 35


def test_a_thread_count_knob_offers_no_more_threads_than_the_job_may_use(tmp_path: Path) -> None:
    # taskset, a container's cpuset or a Slurm allocation pin a job to fewer cores than the machine has.
    import os
    settings = discover(_repo(tmp_path, TYPER, {}), "train.py")
    given = given_values([])
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        plan = plan_knobs(classify(settings, given), given, taken=set())
    finally:
        os.sched_setaffinity(0, before)
    assert plan.knobs["num_threads"]["values"] == [1, 4]  # 4: the script's own default stays offered


@pytest.mark.parametrize("has_gpu", [False, True])
def test_hf_precision_flags_get_the_constraints_the_trainer_enforces(tmp_path: Path, has_gpu: bool) -> None:
    # TrainingArguments raises for fp16 with bf16, and for bf16 without a GPU unless use_cpu is set
    # (transformers 5.x, training_args.py): a search would otherwise spend a crashed trial on each.
    from bot.stages.init.framework_rules import hf_precision_rules
    settings = discover(_repo(tmp_path, HF, {}), "train.py")
    given = given_values(["--per_device_train_batch_size", "8"])
    classified = classify(settings, given)
    plan = plan_knobs(classified, given, taken=set())
    knobs = {k: v for k, v in plan.knobs.items() if k != "use_cpu"}
    rules = hf_precision_rules(knobs, classified, given, has_gpu=has_gpu)
    assert {"kind": "forbid", "when": {"bf16": True, "fp16": True},
            "reason": "TrainingArguments refuses fp16 and bf16 together"} in rules
    cpu_rule = [r for r in rules if r["when"].get("use_cpu") is False]
    if has_gpu:
        assert not cpu_rule and "use_cpu" not in knobs
    else:
        assert cpu_rule and knobs["use_cpu"] == {"flag": "--use_cpu", "kind": "bool", "default": False}
    pinned = given_values(["--use_cpu"])
    assert not [r for r in hf_precision_rules({k: v for k, v in plan.knobs.items() if k != "use_cpu"}, classified,
                                              pinned, has_gpu=False)
                if "use_cpu" in r["when"]]


def test_a_cfgnode_tree_is_passed_as_dotted_key_equals_value_and_gives_tokens(tmp_path: Path) -> None:
    settings = discover(_repo(tmp_path, CFGNODE, {"mingpt/__init__.py": "", "mingpt/trainer.py": CFGNODE_TRAINER}),
                        "train.py")
    by_key = {s.key: s for s in settings}
    assert by_key["trainer.learning_rate"].default == 5e-4  # the project's override of the class default
    assert (by_key["trainer.num_workers"].passing, by_key["trainer.num_workers"].token) == \
        ("flag-equals", "--trainer.num_workers")
    given = given_values(["--trainer.max_iters=100000"])
    tokens = infer_tokens(settings, classify(settings, given), given)
    assert tokens is not None and tokens[0] == 64 * 128


def test_a_print_under_a_literal_modulo_sets_steps_per_line(tmp_path: Path) -> None:
    from bot.stages.init.draft import draft_contract
    from bot.stages.init.scan import scan_repo

    source = CFGNODE + textwrap.indent(textwrap.dedent('''
        def batch_end_callback(trainer):
            if trainer.iter_num % 10 == 0:
                print(f"iter_dt {trainer.iter_dt * 1000:.2f}ms; iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}")
    '''), "    ")
    root = _repo(tmp_path, source, {"mingpt/__init__.py": "", "mingpt/trainer.py": CFGNODE_TRAINER})
    draft = draft_contract("python train.py --trainer.max_iters=100000", scan_repo(root, "train.py"))
    assert draft.data["timing"]["steps_per_line"] == 10


def test_a_switch_and_a_short_alias_on_the_command_keep_the_users_values(tmp_path: Path) -> None:
    # timm's train.py: `-b/--batch-size`, `--grad-accum-steps`, `--amp` (store_true) given on the command
    from bot.stages.init.draft import draft_contract
    from bot.stages.init.scan import scan_repo

    source = textwrap.dedent('''
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument('-b', '--batch-size', type=int, default=128, metavar='N')
        parser.add_argument('--grad-accum-steps', type=int, default=1)
        parser.add_argument('--amp', action='store_true', default=False)
        parser.add_argument('--epochs', type=int, default=300)
        args = parser.parse_args()
        for step in range(10):
            loss = 1.0 / (step + 1)
            print(f"step {step} loss {loss:.4f}")
    ''')
    draft = draft_contract("python train.py -b 64 --grad-accum-steps 2 --epochs 90 --amp",
                           scan_repo(_repo(tmp_path, source, {}), "train.py"))
    knobs = draft.data["knobs"]
    assert knobs["amp"]["default"] is True  # the user's --amp stays on in the baseline
    assert knobs["batch_size"]["default"] == 64 and draft.data["workload"]["args"] == ["--epochs", "90"]
    assert draft.data["constraints"][-1]["value"] == 128
    assert draft.data["workload"]["tokens_per_step"] == 128  # samples: no sequence length
