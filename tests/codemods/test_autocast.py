"""autocast_bf16: before/after, what it declines, and the import it adds."""

from __future__ import annotations

from tests.support.codemods import assert_codemod, assert_declines


def test_autocast_wraps_forward_and_loss_lines() -> None:
    assert_codemod("autocast_bf16", """
        import torch

        def train_step(model, optimizer, x, y, accum):
            # forward
            logits, loss = model(x, y)
            loss = loss / accum
            loss.backward()
            optimizer.step()
            return loss.item()
    """, """
        import torch

        def train_step(model, optimizer, x, y, accum):
            # forward
            with torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16):
                logits, loss = model(x, y)
                loss = loss / accum
            loss.backward()
            optimizer.step()
            return loss.item()
    """)


def test_autocast_declines_code_already_under_autocast() -> None:
    assert_declines("autocast_bf16", """
        import torch

        def train_step(model, x, y):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y)
            loss.backward()
    """, "already runs under torch.autocast")


def test_empty_tuple_arguments_do_not_trip_the_matchers() -> None:
    assert_codemod("autocast_bf16", """
        import torch

        def run(model):
            out = model(())
            return out
    """, """
        import torch

        def run(model):
            with torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16):
                out = model(())
            return out
    """)


def test_added_import_is_recorded() -> None:
    assert_codemod("autocast_bf16", """
        import numpy as np
        from torch import nn

        class Trainer:
            def step(self, batch):
                out = self.model(batch)
                return out
    """, """
        import numpy as np
        from torch import nn
        import torch

        class Trainer:
            def step(self, batch):
                with torch.autocast(device_type=next(self.model.parameters()).device.type, dtype=torch.bfloat16):
                    out = self.model(batch)
                return out
    """, imports=("import torch",))

