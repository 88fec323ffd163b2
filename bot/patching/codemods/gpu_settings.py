"""GPU-only settings, emitted behind ``torch.cuda.is_available()`` so CPU runs are unchanged.

``dataloader_gpu_settings``: ``DataLoader(...)`` gets the options that help a
GPU job and are left at their defaults otherwise::

    pin_memory=torch.cuda.is_available(),
    num_workers=4 if torch.cuda.is_available() and not isinstance(ds, torch.utils.data.IterableDataset) else 0,
    persistent_workers=torch.cuda.is_available() and not isinstance(ds, ...),

An ``IterableDataset`` is excluded at run time because every worker would
replay the whole stream (duplicated batches change what is trained on).
Options already given are kept. Workers reseed per worker, so a dataset that
draws random augmentations in ``__getitem__`` draws different ones; the loss
check catches a job where that matters.

``cuda_backend_flags``: TF32 matmuls/convolutions and cuDNN autotuning::

    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True

placed after the module's imports when the whole file is in scope and it is
an entry-point script (``if __name__ == "__main__":``; flags are process-wide,
so a library module is the wrong place), else at the top of each targeted
function that starts the job (``main``, ``train*``, ``run*``…, or one that runs a
backward pass or builds the optimizer or a data loader; never a model's helpers,
which run many times and start nothing). TF32 rounds matmul inputs to 10 mantissa
bits: faster on Ampere and later, a numerics change the loss check must accept.
"""

from __future__ import annotations

import re

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_DATALOADER = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
_WORKERS = 4
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_POSITION = {"num_workers": 5, "pin_memory": 7}


class DataLoaderGpuSettings(PatchCodemod):
    NAME = "dataloader_gpu_settings"
    NEEDS = ("DataLoader",)
    SUMMARY = ("DataLoader(...) → pin_memory / num_workers / persistent_workers, each on only when "
               "torch.cuda.is_available()")
    NOT_FOUND = "no torch.utils.data.DataLoader(...) call in the targets"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not self.is_call_to(original_node, _DATALOADER):
            return updated_node
        what = f"`{code_of(original_node.func)}(...)`"
        if E.has_star(original_node):
            self.decline(f"{what} passes */** arguments; cannot tell which options are set")
            return updated_node
        dataset = E.argument(original_node, 0, "dataset")
        given = {name for name in ("pin_memory", "num_workers", "persistent_workers")
                 if E.argument(original_node, _POSITION.get(name, 99), name) is not None}
        wanted = [name for name in ("pin_memory", "num_workers", "persistent_workers") if name not in given]
        if "num_workers" in given and "persistent_workers" in wanted:
            workers = E.literal_int(E.argument(original_node, 5, "num_workers"))
            if workers is None or workers <= 0:
                wanted.remove("persistent_workers")  # only valid with workers
        if "num_workers" in wanted and (dataset is None or not E.is_pure(dataset)):
            wanted = [w for w in wanted if w == "pin_memory"]
            self.decline(f"{what}: workers need the dataset as a plain name to exclude IterableDatasets")
        if not wanted:
            if len(given) == 3:
                self.decline(f"{what} already sets pin_memory, num_workers and persistent_workers")
            return updated_node
        if not self.site_allowed(what):
            return updated_node
        cuda = f"{code_of(self.ref('torch.cuda.is_available'))}()"
        values = {"pin_memory": cuda, "persistent_workers": "True"}
        if "num_workers" in wanted:
            iterable = code_of(self.ref("torch.utils.data.IterableDataset"))
            workers_ok = f"{cuda} and not isinstance({code_of(E.strip(dataset))}, {iterable})"  # type: ignore[arg-type]
            values["num_workers"] = f"{_WORKERS} if {workers_ok} else 0"
            values["persistent_workers"] = workers_ok
        call = updated_node
        for name in wanted:
            call = E.insert_arg(call, E.kwarg(name, E.expr(values[name])))
        self.mark_edited()
        return call


_FLAGS = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.benchmark",
)


#: Where a job starts: by name, or a function that trains (a backward pass, an optimizer, a data loader).
_STARTS_JOB_NAME = re.compile(r"^(main|main_worker|train\w*|run\w*|fit\w*|setup\w*|launch\w*|pretrain\w*)$")
_TRAINS = re.compile(r"\.backward\(|\boptim\.|Optimizer\(|DataLoader\(|\.step\(\)")


class CudaBackendFlags(PatchCodemod):
    NAME = "cuda_backend_flags"
    SUMMARY = "TF32 matmul/cuDNN and cudnn.benchmark, set once behind `if torch.cuda.is_available():`"
    NOT_FOUND = "no place in the targets to set the backend flags (needs the whole file or a function target)"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self._missing = self._unset_flags(tree)
        return super().transform_module_impl(tree)

    def _unset_flags(self, tree: cst.Module) -> list[str]:
        assigned: set[str] = set()
        precision = False
        for small in E.statements_in(tree):
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    assigned.add(code_of(target.target))
            if isinstance(small, cst.Expr) and "set_float32_matmul_precision" in code_of(small.value):
                precision = True
        missing = [flag for flag in _FLAGS if not any(a.endswith(flag.split("torch.", 1)[1]) for a in assigned)]
        if precision and _FLAGS[0] in missing:
            missing.remove(_FLAGS[0])  # set_float32_matmul_precision already decides TF32 matmuls
        return missing

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if self.scope is None or self.where not in self.scope or not self._missing_or_decline():
            return updated_node
        if not _STARTS_JOB_NAME.match(original_node.name.value) and not _TRAINS.search(code_of(original_node)):
            # a model's helper (`exists`, `l1norm`) runs many times and starts nothing: process-wide flags belong
            # where the job starts (its main or training function)
            self.decline(f"`{self.where}` is not where the job starts (no training step, optimizer or data loader "
                         "in it); process-wide backend flags belong in the function that starts the job")
            return updated_node
        body = updated_node.body
        if not isinstance(body, cst.IndentedBlock):
            self.decline("a one-line function body cannot take the flags")
            return updated_node
        statements = list(body.body)
        at = 1 if statements and is_docstring(statements[0]) else 0
        statements.insert(at, self._guarded())
        self.mark_edited()
        return updated_node.with_changes(body=body.with_changes(body=statements))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.in_scope() or not self._missing_or_decline():
            return updated_node
        if not _is_entry_point(original_node):
            self.decline("not an entry-point script (no `if __name__ == \"__main__\":`); process-wide "
                         "backend flags belong in the script that starts the job")
            return updated_node
        statements = list(updated_node.body)
        at = 0
        for i, statement in enumerate(statements):
            if isinstance(statement, cst.SimpleStatementLine) and all(
                    isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body):
                at = i + 1
            elif i == 0 and is_docstring(statement):
                at = 1
        guarded = self._guarded()
        if at > 0:
            guarded = guarded.with_changes(leading_lines=[cst.EmptyLine()])
        statements.insert(at, guarded)
        self.mark_edited()
        return updated_node.with_changes(body=statements)

    def _missing_or_decline(self) -> bool:
        if not self._missing:
            self.decline("TF32 and cudnn.benchmark are already set in this file")
            return False
        return True

    def _guarded(self) -> cst.If:
        lines = [cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(self.ref(flag))],
                                                          value=cst.Name("True"))])
                 for flag in self._missing]
        test = cst.Call(func=self.ref("torch.cuda.is_available"))
        return cst.If(test=test, body=cst.IndentedBlock(body=lines))


def _is_entry_point(module: cst.Module) -> bool:
    return any(isinstance(s, cst.If) and "__name__" in code_of(s.test) and "__main__" in code_of(s.test)
               for s in module.body)


def is_docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString))
