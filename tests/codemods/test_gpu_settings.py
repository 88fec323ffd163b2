"""dataloader_gpu_settings and cuda_backend_flags: before/after, flags already set, module scope."""

from __future__ import annotations

from bot.patching.codemods import run_codemod
from bot.patching.results import Declined, Rewritten
from tests.support.codemods import assert_codemod, assert_declines, norm


def test_dataloader_gpu_settings() -> None:
    assert_codemod("dataloader_gpu_settings", """
        import torch
        from torch.utils.data import DataLoader

        def loaders(train_ds, val_ds, bs):
            train = DataLoader(train_ds, batch_size=bs, shuffle=True)
            val = DataLoader(val_ds, bs, False, None, None, 2)
            return train, val
    """, """
        import torch
        from torch.utils.data import DataLoader

        def loaders(train_ds, val_ds, bs):
            train = DataLoader(train_ds, batch_size=bs, shuffle=True, pin_memory=torch.cuda.is_available(), num_workers=4 if torch.cuda.is_available() and not isinstance(train_ds, torch.utils.data.IterableDataset) else 0, persistent_workers=torch.cuda.is_available() and not isinstance(train_ds, torch.utils.data.IterableDataset))
            val = DataLoader(val_ds, bs, False, None, None, 2, pin_memory=torch.cuda.is_available(), persistent_workers=True)
            return train, val
    """)
    assert_declines("dataloader_gpu_settings", """
        import torch
        def loader(ds):
            return torch.utils.data.DataLoader(ds, pin_memory=True, num_workers=0, persistent_workers=False)
    """, "already sets pin_memory, num_workers and persistent_workers")


def test_cuda_backend_flags_in_an_entry_script() -> None:
    assert_codemod("cuda_backend_flags", """
        \"\"\"Train.\"\"\"
        import torch


        def main():
            pass


        if __name__ == "__main__":
            main()
    """, """
        \"\"\"Train.\"\"\"
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cudnn.benchmark = True


        def main():
            pass


        if __name__ == "__main__":
            main()
    """, symbols=("<module>",))


def test_cuda_backend_flags_in_a_target_function_skip_flags_already_set() -> None:
    assert_codemod("cuda_backend_flags", """
        import torch

        def main():
            \"\"\"Entry.\"\"\"
            torch.backends.cudnn.benchmark = True
            run()
    """, """
        import torch

        def main():
            \"\"\"Entry.\"\"\"
            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            torch.backends.cudnn.benchmark = True
            run()
    """, scope=["main"])
    assert_declines("cuda_backend_flags", """
        import torch
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        if __name__ == "__main__":
            pass
    """, "already set in this file")


def test_module_scope_round_trips_through_reported_symbols() -> None:
    # Rewritten.symbols says `<module>` for module-level edits; given back as the scope, it allows them.
    source = norm("""
        import torch

        def main():
            pass

        if __name__ == "__main__":
            main()
    """)
    first = run_codemod("cuda_backend_flags", source)
    assert isinstance(first, Rewritten) and first.symbols == ("<module>",)
    again = run_codemod("cuda_backend_flags", source, scope=list(first.symbols))
    assert isinstance(again, Rewritten) and again.code == first.code
    assert isinstance(run_codemod("cuda_backend_flags", source, scope=["main.helper"]), Declined)



def test_cuda_backend_flags_go_where_the_job_starts_never_into_a_models_helpers() -> None:
    # lucidrains/x-transformers: a package of small helpers (`exists`, `default`, `l1norm`) beside the model
    source = """
        import torch

        def exists(v):
            return v is not None

        def l1norm(t):
            return t / t.abs().sum(-1, keepdim=True)

        def train(model, loader):
            opt = torch.optim.Adam(model.parameters())
            for x in loader:
                model(x).sum().backward()
                opt.step()
    """
    result = run_codemod("cuda_backend_flags", norm(source), scope=["exists", "l1norm", "train"])
    assert isinstance(result, Rewritten) and result.symbols == ("train",)
    assert_declines("cuda_backend_flags", source, "is not where the job starts", scope=["exists", "l1norm"])
