"""autocast_fp16_scaler: before/after on the loops public trainers write (a torchvision-style epoch
function, a nanoGPT-style script with accumulation and clipping), what it declines and why, that a CPU run
is unchanged, and that a step the entry point never runs does not apply."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from bot.patching.catalog import CATALOG, catalog_for_repo
from infrarsi.conflicts import conflicts as rule
from infrarsi.contract import load_contract
from tests.support.codemods import assert_codemod, assert_declines, both

NAME = "autocast_fp16_scaler"

# torchvision's classification reference / timm shape: an epoch function, the device from the caller.
EPOCH = """
    import torch
    from torch import nn

    def train_one_epoch(model, criterion, optimizer, data_loader, device="cuda"):
        model.train()
        for image, target in data_loader:
            image, target = image.to(device), target.to(device)
            output = model(image)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
"""

EPOCH_AFTER = """
    import torch
    from torch import nn

    def train_one_epoch(model, criterion, optimizer, data_loader, device="cuda"):
        model.train()
        scaler = torch.amp.GradScaler("cuda", enabled=next(model.parameters()).is_cuda)
        for image, target in data_loader:
            image, target = image.to(device), target.to(device)
            with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
                output = model(image)
                loss = criterion(output, target)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
"""


def test_an_epoch_function_gets_autocast_a_scaler_and_unscale_before_clipping() -> None:
    assert_codemod(NAME, EPOCH, EPOCH_AFTER, symbols=("train_one_epoch",))


def test_a_script_with_accumulation_gets_one_scaler_before_the_step_loop() -> None:
    # nanoGPT's train.py shape: module globals, a micro-step loop inside the step loop, optional clipping.
    assert_codemod(NAME, """
        import torch
        from model import GPT

        device = 'cuda'
        grad_clip = 1.0
        model = GPT().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
        while True:
            for micro_step in range(4):
                X, Y = get_batch('train')
                logits, loss = model(X, Y)
                loss = loss / 4
                (loss).backward()
            if grad_clip != 0.0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    """, """
        import torch
        from model import GPT

        device = 'cuda'
        grad_clip = 1.0
        model = GPT().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
        scaler = torch.amp.GradScaler("cuda", enabled=next(model.parameters()).is_cuda)
        while True:
            for micro_step in range(4):
                X, Y = get_batch('train')
                with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
                    logits, loss = model(X, Y)
                    loss = loss / 4
                scaler.scale(loss).backward()
            if grad_clip != 0.0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    """, symbols=("<module>",))


def test_a_native_pytorch_fine_tuning_loop_gets_its_scaler_before_the_epoch_loop() -> None:
    # The Hugging Face course's training loop without Trainer: epochs around batches, a scheduler stepping too.
    assert_codemod(NAME, """
        import torch

        def train(model, optimizer, lr_scheduler, train_dataloader, num_epochs):
            device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
            for epoch in range(num_epochs):
                model.train()
                for batch in train_dataloader:
                    batch = {k: v.to(device) for k, v in batch.items()}
                    outputs = model(**batch)
                    loss = outputs.loss
                    loss.backward()
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
    """, """
        import torch

        def train(model, optimizer, lr_scheduler, train_dataloader, num_epochs):
            device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
            scaler = torch.amp.GradScaler("cuda", enabled=next(model.parameters()).is_cuda)
            for epoch in range(num_epochs):
                model.train()
                for batch in train_dataloader:
                    batch = {k: v.to(device) for k, v in batch.items()}
                    with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
                        outputs = model(**batch)
                        loss = outputs.loss
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    lr_scheduler.step()
                    optimizer.zero_grad()
    """)


def test_a_device_agnostic_torch_accelerator_loop_gets_its_scaler() -> None:
    # pytorch/examples' mnist: the device is `torch.accelerator.current_accelerator()`, no "cuda" anywhere.
    assert_codemod(NAME, """
        import torch
        import torch.nn.functional as F

        def train(model, device, train_loader, optimizer):
            model.train()
            for data, target in train_loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                output = model(data)
                loss = F.nll_loss(output, target)
                loss.backward()
                optimizer.step()

        def main():
            device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else "cpu"
    """, """
        import torch
        import torch.nn.functional as F

        def train(model, device, train_loader, optimizer):
            model.train()
            scaler = torch.amp.GradScaler("cuda", enabled=next(model.parameters()).is_cuda)
            for data, target in train_loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
                    output = model(data)
                    loss = F.nll_loss(output, target)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()

        def main():
            device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else "cpu"
    """, symbols=("train",))


@pytest.mark.parametrize("source,reason", [
    # The device never leaves the CPU: bf16 is the recipe there, not fp16 with a scaler.
    ("""
        import torch
        def train(model, optimizer, batches):
            for x, y in batches:
                loss = model(x, y)
                loss.backward()
                optimizer.step()
    """, "never puts anything on CUDA"),
    ("""
        import torch
        def train(model, optimizer, batches):
            for x, y in batches:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x.cuda(), y.cuda())
                loss.backward()
                optimizer.step()
    """, "already runs under torch.autocast or a GradScaler"),
    # One step per call, the loop in the (locked) harness: a scaler made here would forget its scale.
    ("""
        import torch
        def train_step(model, optimizer, x, y):
            loss = model(x.cuda(), y.cuda())
            loss.backward()
            optimizer.step()
    """, "not inside a loop here"),
    # A model file: forward only, the step is elsewhere.
    ("""
        import torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return self.fc(x.cuda())
    """, "no training step (a model call, `loss.backward()` and `optimizer.step()`) in the targets; "
         "a GradScaler needs both the backward pass and the optimizer step"),
    ("""
        import torch
        def accumulate(model, batches):
            for x, y in batches:
                loss = model(x.cuda(), y.cuda())
                loss.backward()
    """, "has `.backward()` but no `optimizer.step()`"),
    # Hugging Face Accelerate scales the loss itself: `accelerator.backward(loss)` is not a tensor's backward.
    ("""
        import torch
        def train(model, optimizer, loader, accelerator):
            for batch in loader:
                outputs = model(**batch)
                loss = outputs.loss
                accelerator.backward(loss)
                optimizer.step()
    """, "has `optimizer.step()` but no `.backward()`"),
], ids=["cpu-only", "already-autocast", "no-loop", "forward-only", "no-step", "accelerate"])
def test_declines(source: str, reason: str) -> None:
    assert_declines(NAME, source, reason)


def test_a_locked_step_reports_why_a_scaler_cannot_be_added() -> None:
    assert_declines(NAME, EPOCH, "training step found but outside the patch targets (build_model); "
                    "a GradScaler needs both the backward pass and the optimizer step", scope=["build_model"])


class PlainSGD:
    """SGD with torch.optim's step/zero_grad signatures (torch.optim's first use costs seconds of imports)."""

    def __init__(self, params, lr: float) -> None:  # type: ignore[no-untyped-def]
        self.params, self.lr = list(params), lr

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            p -= self.lr * p.grad


def test_on_cpu_the_patched_loop_trains_exactly_as_before() -> None:
    before, after = both(NAME, EPOCH)
    results = []
    for namespace in (before, after):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        optimizer = PlainSGD(model.parameters(), lr=0.1)
        data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(3)]
        namespace["train_one_epoch"](model, torch.nn.CrossEntropyLoss(), optimizer, data, device="cpu")
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(results[0], results[1])  # scaler and autocast disabled off CUDA: bit-identical


def test_it_conflicts_with_every_bf16_autocast() -> None:
    conflicts = rule([e.spec(("train.py",)) for e in CATALOG])  # the one rule
    for bf16 in ("autocast_bf16", "autocast_forward_bf16", "hf_bf16", "lightning_bf16_precision"):
        assert bf16 in conflicts[NAME] and NAME in conflicts[bf16]
    assert {e.codemod: e.decides for e in CATALOG}[NAME] == ("compute_dtype",)


_CONTRACT = """
    version = 1

    [workload]
    command = "python train.py"
    tokens_per_step = 32

    [timing]
    warmup_steps = 1
    measured_steps = 2

    [scope]
    editable = ["train.py"]
    locked = []
"""
# The step loop lives in a function nothing calls, and in a branch a module global rules out.
_TRAIN = """
    import torch

    BACKEND = "fused"


    def train_legacy(model, optimizer, batches):
        for x, y in batches:
            out = model(x.cuda())
            loss = (out - y.cuda()).square().mean()
            loss.backward()
            optimizer.step()


    def main():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if BACKEND == "legacy":
            model.train()
            for step in range(4):
                out = model(torch.randn(8, 4, device="cuda"))
                loss = out.square().mean()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
"""


def test_steps_in_an_unreached_function_and_a_dead_branch_do_not_apply(tmp_path: Path) -> None:
    for name, text in {"infrarsi.toml": _CONTRACT, "train.py": _TRAIN}.items():
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    found = {a.entry.codemod: a for a in catalog_for_repo(load_contract(tmp_path))}[NAME]
    assert not found.applies, found.spec
    assert any("does not apply: not reached from the entry point" in r for r in found.reasons), found.reasons
    # With the branch live, the step in main applies.
    (tmp_path / "train.py").write_text(textwrap.dedent(_TRAIN).lstrip().replace('"fused"', '"legacy"'))
    found = {a.entry.codemod: a for a in catalog_for_repo(load_contract(tmp_path))}[NAME]
    assert found.spec is not None and "train.py::main" in found.spec.targets, found
