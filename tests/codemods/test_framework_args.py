"""hf_bf16, hf_fused_optim, hf_torch_compile, lightning_bf16_precision: before/after on the shapes
fine-tuning scripts and Lightning projects write, and what each declines."""

from __future__ import annotations

import pytest

from bot.patching.catalog import CATALOG
from infrarsi.conflicts import conflicts as rule
from tests.support.codemods import assert_codemod, assert_declines

# TrainingArguments built in code, one argument per line with trailing comments (the common
# fine-tuning script shape), next to a Trainer that consumes it.
HF_SCRIPT = """
    from transformers import Trainer, TrainingArguments

    def main(model, dataset):
        training_args = TrainingArguments(
            output_dir="./results",
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,  # accumulate before each update
            logging_steps=1,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
        trainer.train()
"""


def test_hf_bf16_adds_the_argument_in_the_calls_layout() -> None:
    assert_codemod("hf_bf16", HF_SCRIPT, """
        from transformers import Trainer, TrainingArguments

        def main(model, dataset):
            training_args = TrainingArguments(
                output_dir="./results",
                per_device_train_batch_size=4,
                gradient_accumulation_steps=2,  # accumulate before each update
                logging_steps=1,
                bf16=True,
            )
            trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
            trainer.train()
    """, symbols=("main",))


def test_hf_fused_optim_replaces_the_default_adamw_and_sees_through_a_module_alias() -> None:
    assert_codemod("hf_fused_optim", """
        import transformers as tf

        args = tf.Seq2SeqTrainingArguments(output_dir="out", optim="adamw_torch", bf16=True)
    """, """
        import transformers as tf

        args = tf.Seq2SeqTrainingArguments(output_dir="out", optim="adamw_torch_fused", bf16=True)
    """)


def test_hf_torch_compile_flips_an_explicit_false() -> None:
    assert_codemod("hf_torch_compile", """
        from transformers import TrainingArguments

        def get_training_args(output_dir: str) -> TrainingArguments:
            return TrainingArguments(output_dir=output_dir, torch_compile=False, num_train_epochs=1)
    """, """
        from transformers import TrainingArguments

        def get_training_args(output_dir: str) -> TrainingArguments:
            return TrainingArguments(output_dir=output_dir, torch_compile=True, num_train_epochs=1)
    """)


@pytest.mark.parametrize("source,reason", [
    # fp16 already chosen: bf16 and fp16 are exclusive in the Trainer.
    ("""
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", fp16=True)
    """, "sets fp16=True"),
    # The user's own switch: a launch knob decides it, not a patch.
    ("""
        from transformers import TrainingArguments
        def build(cfg):
            return TrainingArguments(output_dir="out", bf16=cfg.bf16)
    """, "from an expression (cfg.bf16)"),
    ("""
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", bf16=True)
    """, "already has bf16=True"),
    ("""
        from transformers import TrainingArguments
        def build(**overrides):
            return TrainingArguments(output_dir="out", **overrides)
    """, "may already set bf16"),
    # HfArgumentParser builds the arguments from the command line: init drafts them as knobs.
    ("""
        from transformers import HfArgumentParser, TrainingArguments
        (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    """, "no transformers TrainingArguments(...) call"),
    # A class of the same name that is not the framework's.
    ("""
        import transformers
        from mylib import TrainingArguments
        args = TrainingArguments(output_dir="out")
    """, "no transformers TrainingArguments(...) call"),
    ("""
        import torch
        args = dict(output_dir="out")
    """, "does not import transformers"),
], ids=["fp16-chosen", "expression", "already", "star-kwargs", "from-the-command-line", "other-class", "no-hf"])
def test_hf_bf16_declines(source: str, reason: str) -> None:
    assert_declines("hf_bf16", source, reason)


def test_hf_fused_optim_leaves_another_optimizer_alone() -> None:
    assert_declines("hf_fused_optim", """
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", optim="paged_adamw_32bit")
    """, 'chose optim="paged_adamw_32bit"')


LIGHTNING_SCRIPT = """
    import lightning as L

    def main(model, loader):
        trainer = L.Trainer(max_steps=100, accelerator="auto", devices=1)
        trainer.fit(model, loader)
"""


def test_lightning_bf16_precision_on_a_trainer_built_in_code() -> None:
    assert_codemod("lightning_bf16_precision", LIGHTNING_SCRIPT, """
        import lightning as L

        def main(model, loader):
            trainer = L.Trainer(max_steps=100, accelerator="auto", devices=1, precision="bf16-mixed")
            trainer.fit(model, loader)
    """)


def test_lightning_bf16_precision_replaces_full_precision_in_pytorch_lightning() -> None:
    assert_codemod("lightning_bf16_precision", """
        from pytorch_lightning import Trainer
        trainer = Trainer(max_epochs=1, precision=32)
    """, """
        from pytorch_lightning import Trainer
        trainer = Trainer(max_epochs=1, precision="bf16-mixed")
    """)


@pytest.mark.parametrize("precision", ['"16-mixed"', "16", '"bf16"'])
def test_lightning_bf16_precision_keeps_a_mixed_precision_already_chosen(precision: str) -> None:
    assert_declines("lightning_bf16_precision", f"""
        from lightning.pytorch import Trainer
        trainer = Trainer(precision={precision})
    """, "does not replace")


def test_framework_settings_stay_inside_the_targets() -> None:
    assert_declines("lightning_bf16_precision", LIGHTNING_SCRIPT, "outside the patch targets", scope=["other"])


def test_each_framework_setting_conflicts_with_the_hand_written_change_it_duplicates() -> None:
    conflicts = rule([entry.spec(("train.py",)) for entry in CATALOG])  # the one rule
    for framework, by_hand in [("hf_bf16", "autocast_bf16"), ("hf_bf16", "autocast_forward_bf16"),
                               ("lightning_bf16_precision", "autocast_forward_bf16"),
                               ("hf_fused_optim", "optimizer_fused"), ("hf_torch_compile", "torch_compile_model")]:
        assert by_hand in conflicts[framework] and framework in conflicts[by_hand], (framework, by_hand)


def test_hf_tf32_asks_transformers_own_tf32_check_instead_of_a_literal_true() -> None:
    # tf32=True raises ValueError in TrainingArguments on a CPU or a pre-Ampere GPU; the value is off there.
    assert_codemod("hf_tf32", HF_SCRIPT, """
        from transformers import Trainer, TrainingArguments
        import transformers

        def main(model, dataset):
            training_args = TrainingArguments(
                output_dir="./results",
                per_device_train_batch_size=4,
                gradient_accumulation_steps=2,  # accumulate before each update
                logging_steps=1,
                tf32=transformers.utils.is_torch_tf32_available(),
            )
            trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
            trainer.train()
    """, imports=("import transformers",), symbols=("main",))


def test_hf_tf32_replaces_the_default_none_through_an_existing_alias() -> None:
    assert_codemod("hf_tf32", """
        import transformers as tf
        args = tf.TrainingArguments(output_dir="out", tf32=None)
    """, """
        import transformers as tf
        args = tf.TrainingArguments(output_dir="out", tf32=tf.utils.is_torch_tf32_available())
    """)


@pytest.mark.parametrize("source,reason", [
    ("""
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", tf32=True)
    """, "already has tf32="),
    # An explicit False is a numerics choice (bit-closer fp32), not the default.
    ("""
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", tf32=False)
    """, "chose tf32=False"),
    ("""
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", use_cpu=True)
    """, "pins the job to the CPU (use_cpu=True); tf32 only acts on CUDA"),
    ("""
        import torch
        args = dict(output_dir="out")
    """, "does not import transformers"),
], ids=["already", "explicit-false", "cpu", "no-hf"])
def test_hf_tf32_declines(source: str, reason: str) -> None:
    assert_declines("hf_tf32", source, reason)


def test_lightning_benchmark_on_a_trainer_built_in_code() -> None:
    assert_codemod("lightning_benchmark", """
        from lightning.pytorch import Trainer

        def main(model, loader):
            trainer = Trainer(
                max_epochs=10,
                accelerator="gpu",
                devices=1,
            )
            trainer.fit(model, loader)
    """, """
        from lightning.pytorch import Trainer

        def main(model, loader):
            trainer = Trainer(
                max_epochs=10,
                accelerator="gpu",
                devices=1,
                benchmark=True,
            )
            trainer.fit(model, loader)
    """)


@pytest.mark.parametrize("source,reason", [
    # The fixtures' own Lightning job pins the CPU: cuDNN autotuning would change nothing there.
    (LIGHTNING_SCRIPT.replace('accelerator="auto"', 'accelerator="cpu"'),
     'pins the job to the CPU (accelerator="cpu"); benchmark only acts on CUDA'),
    # Benchmarking chooses algorithms by timing: it would undo what deterministic=True asks for.
    ("""
        import pytorch_lightning as pl
        trainer = pl.Trainer(deterministic=True)
    """, "sets deterministic=True; benchmark is not combined with it"),
    ("""
        import lightning as L
        trainer = L.Trainer(benchmark=False)
    """, "chose benchmark=False"),
    ("""
        import lightning as L
        trainer = L.Trainer(benchmark=True)
    """, "already has benchmark=True"),
], ids=["cpu", "deterministic", "explicit-false", "already"])
def test_lightning_benchmark_declines(source: str, reason: str) -> None:
    assert_declines("lightning_benchmark", source, reason)


def test_the_gpu_only_framework_settings_conflict_with_the_hand_written_backend_flags() -> None:
    conflicts = rule([entry.spec(("train.py",)) for entry in CATALOG])  # the one rule
    by_id = {entry.codemod: entry for entry in CATALOG}
    for framework in ("hf_tf32", "lightning_benchmark"):
        assert "cuda_backend_flags" in conflicts[framework] and framework in conflicts["cuda_backend_flags"]
        assert by_id[framework].gpu_only and "GPU only" in by_id[framework].title
