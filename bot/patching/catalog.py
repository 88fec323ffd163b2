"""The built-in patch catalog: each registered codemod with its prior, and where it applies in a repo.

A catalog entry is repo-independent (a codemod and what it is expected to buy);
:func:`catalog_for_repo` runs every codemod over the contract's editable files,
restricted to the editable symbols, and turns each one that rewrites something
into a :class:`PatchSpec` targeting exactly the symbols it edits. Priors are
documented with their sources in ``docs/priors.md``. An entry says what it
decides, never which entries it conflicts with: :mod:`infrarsi.conflicts`
derives that from the decisions (two bf16 autocasts both decide the compute
dtype) and from what the patches change in the repo.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from bot.patching.codemods import REGISTRY, run_codemod
from bot.progress import Ticker
from bot.patching.reach import Reach, analyse, command_argv
from bot.patching.results import Broken, Declined, Rewritten
from infrarsi.contract.model import Contract
from infrarsi.contract.scope import split_symbol
from infrarsi.patches import Effect, PatchSpec
from infrarsi.source_text import read_source


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogEntry:
    codemod: str
    title: str
    rationale: str
    effect: Effect
    # What it chooses (infrarsi.decisions): two entries deciding the same thing, or one and a knob away from
    # its default deciding it, never share a candidate (infrarsi.conflicts). No entry lists its conflicts.
    decides: tuple[str, ...] = ()
    gpu_only: bool = False  # acts only on a GPU: the doctor leaves it out where trials run on a CPU

    def spec(self, targets: tuple[str, ...]) -> PatchSpec:
        """The entry as a patch of ``targets`` (the symbols it rewrites in some repo)."""
        return PatchSpec(id=self.codemod, title=self.title, rationale=self.rationale, targets=targets,
                         effect=self.effect, kind="codemod", codemod=self.codemod, decides=self.decides,
                         gpu_only=self.gpu_only)


def _e(time_ratio: float, time_sigma: float, mem_ratio: float, mem_sigma: float, source: str) -> Effect:
    return Effect(time_ratio=time_ratio, time_sigma=time_sigma, mem_ratio=mem_ratio, mem_sigma=mem_sigma,
                  source=source)


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(codemod="sdpa_causal_attention", title="Fused causal attention (SDPA)",
                 rationale="softmax(q·kᵀ)·v by hand materialises B·H·T·T scores and a mask in fp32; "
                 "scaled_dot_product_attention fuses them and never stores the full matrix",
                 effect=_e(0.85, 0.2, 0.85, 0.15, "docs/priors.md#sdpa")),
    CatalogEntry(codemod="fused_gelu", title="Fused GELU",
                 rationale="the tanh formula in Python launches ~8 elementwise kernels and keeps their outputs "
                 "for backward; F.gelu is one kernel",
                 effect=_e(0.95, 0.05, 0.97, 0.05, "docs/priors.md#gelu")),
    CatalogEntry(codemod="fused_cross_entropy", title="Fused cross-entropy",
                 rationale="log_softmax over fp32 logits then gather keeps several logits-sized tensors; "
                 "F.cross_entropy fuses them",
                 effect=_e(0.93, 0.08, 0.8, 0.15, "docs/priors.md#cross-entropy")),
    CatalogEntry(codemod="optimizer_foreach", title="Multi-tensor optimizer (foreach)",
                 rationale="the for-loop optimizer launches kernels per parameter; foreach batches them",
                 effect=_e(0.95, 0.05, 1.02, 0.03, "docs/priors.md#optimizer"),
                 decides=("optimizer_impl",)),
    CatalogEntry(codemod="optimizer_fused", title="Fused optimizer",
                 rationale="one fused kernel per step instead of per-parameter loops",
                 effect=_e(0.93, 0.06, 1.0, 0.03, "docs/priors.md#optimizer"),
                 decides=("optimizer_impl",)),
    CatalogEntry(codemod="zero_grad_set_to_none", title="zero_grad(set_to_none=True)",
                 rationale="frees gradients instead of writing zeros into them every step",
                 effect=_e(0.99, 0.02, 0.98, 0.03, "docs/priors.md#zero-grad")),
    CatalogEntry(codemod="checkpoint_blocks", title="Activation checkpointing of blocks",
                 rationale="a memory saver: recomputes each block's forward in backward instead of storing "
                 "its activations",
                 effect=_e(1.25, 0.1, 0.65, 0.15, "docs/priors.md#checkpointing"),
                 decides=("activation_checkpointing",)),
    CatalogEntry(codemod="autocast_bf16", title="bf16 autocast around forward and loss",
                 rationale="matmuls in bf16 run on tensor cores (AMX on recent CPUs) at several times fp32 speed",
                 effect=_e(0.6, 0.25, 0.85, 0.15, "docs/priors.md#autocast"),
                 decides=("compute_dtype",)),
    CatalogEntry(codemod="autocast_forward_bf16", title="bf16 autocast inside the model's forward",
                 rationale="where the training loop is locked, the model's own forward is the editable place "
                 "that every forward runs through; matmuls in bf16 run several times faster than fp32 "
                 "(tensor cores, AMX/AVX-512 bf16 on CPUs) while the loss stays in fp32",
                 effect=_e(0.6, 0.25, 0.85, 0.15, "docs/priors.md#autocast"),
                 decides=("compute_dtype",)),
    CatalogEntry(codemod="torch_compile_model", title="torch.compile the model",
                 rationale="fuses elementwise chains and removes Python overhead; costs compile time in warm-up",
                 effect=_e(0.8, 0.3, 0.9, 0.2, "docs/priors.md#compile"),
                 decides=("compile",)),
    CatalogEntry(codemod="dataloader_gpu_settings", title="DataLoader pinned memory and workers (GPU only)",
                 gpu_only=True,
                 rationale="overlaps host-to-device copies and data loading with compute",
                 effect=_e(0.97, 0.05, 1.02, 0.03, "docs/priors.md#gpu-settings")),
    CatalogEntry(codemod="cuda_backend_flags", title="TF32 matmul and cudnn.benchmark (GPU only)",
                 gpu_only=True,
                 rationale="TF32 tensor-core matmuls on Ampere and later; autotuned convolutions",
                 effect=_e(0.9, 0.1, 1.0, 0.02, "docs/priors.md#gpu-settings"),
                 decides=("tf32_matmul", "cudnn_benchmark")),
    CatalogEntry(codemod="grouped_experts", title="Grouped MoE experts (sorted, padded, batched matmul)",
                 rationale="a Python loop over experts launches a where, a gather, two matmuls and a scatter per "
                 "expert (and as many in backward); sorting the assignments by expert and one batched matmul per "
                 "weight does the same work in a few large kernels, at the cost of padding to the fullest expert",
                 effect=_e(0.75, 0.25, 1.1, 0.15, "docs/distributed.md#grouped-experts")),
    CatalogEntry(codemod="ddp_no_sync", title="DDP no_sync() on all but the last micro-step",
                 rationale="DistributedDataParallel all-reduces every backward; under gradient accumulation only "
                 "the last one is needed, the others can accumulate locally",
                 effect=_e(0.85, 0.15, 1.0, 0.05, "docs/distributed.md#no-sync")),
    # The framework's own arguments, where the code builds them (bot/patching/codemods/framework_args.py).
    CatalogEntry(codemod="hf_bf16", title="Hugging Face Trainer in bf16 (bf16=True)",
                 rationale="the Trainer then autocasts forward and loss to bf16; matmuls run several times "
                 "faster than fp32 on tensor cores and on CPUs with AVX-512 bf16/AMX",
                 effect=_e(0.6, 0.25, 0.85, 0.15, "docs/priors.md#framework-args"),
                 decides=("compute_dtype",)),
    CatalogEntry(codemod="hf_fused_optim", title='Hugging Face Trainer with fused AdamW (optim="adamw_torch_fused")',
                 rationale="the same AdamW update in one fused kernel instead of per-parameter loops",
                 effect=_e(0.93, 0.06, 1.0, 0.03, "docs/priors.md#framework-args"),
                 decides=("optimizer_impl",)),
    CatalogEntry(codemod="hf_torch_compile", title="Hugging Face Trainer with torch_compile=True",
                 rationale="the Trainer compiles the model: fused elementwise chains, less Python overhead; "
                 "costs compile time in warm-up",
                 effect=_e(0.8, 0.3, 0.9, 0.2, "docs/priors.md#framework-args"),
                 decides=("compile",)),
    CatalogEntry(codemod="lightning_bf16_precision", title='Lightning Trainer in bf16 (precision="bf16-mixed")',
                 rationale="Lightning autocasts the training step to bf16 and keeps fp32 weights; matmuls run "
                 "several times faster than fp32",
                 effect=_e(0.6, 0.25, 0.85, 0.15, "docs/priors.md#framework-args"),
                 decides=("compute_dtype",)),
    CatalogEntry(codemod="hf_tf32", title="Hugging Face Trainer with TF32 matmuls (tf32; GPU only)",
                 gpu_only=True,
                 rationale="TF32 tensor-core matmuls on Ampere and later, through the Trainer's own argument; "
                 "the value asks transformers' TF32 check, since tf32=True raises where there is no such GPU",
                 effect=_e(0.9, 0.1, 1.0, 0.02, "docs/priors.md#framework-args"),
                 decides=("tf32_matmul",)),
    CatalogEntry(codemod="lightning_benchmark", title="Lightning Trainer with cuDNN autotuning (benchmark=True; GPU only)",
                 gpu_only=True,
                 rationale="cuDNN times the convolution algorithms for each input shape once and keeps the "
                 "fastest",
                 effect=_e(0.95, 0.08, 1.02, 0.05, "docs/priors.md#framework-args"),
                 decides=("cudnn_benchmark",)),
    # Mixed precision with a loss scaler, and the layout convolutions want (docs/priors.md#autocast, #channels-last).
    CatalogEntry(codemod="autocast_fp16_scaler", title="fp16 autocast with a GradScaler on CUDA (GPU only)",
                 gpu_only=True,
                 rationale="fp16 matmuls and convolutions run on tensor cores like bf16 (and on GPUs without bf16); "
                 "the scaler keeps small gradients from underflowing, so backward and the optimizer step change too",
                 effect=_e(0.6, 0.25, 0.85, 0.15, "docs/priors.md#autocast"),
                 decides=("compute_dtype",)),
    CatalogEntry(codemod="channels_last", title="Channels-last memory format for a convolutional model",
                 rationale="cuDNN's tensor-core convolutions and oneDNN's CPU kernels run NHWC; an NCHW model pays a "
                 "transpose around every convolution",
                 effect=_e(0.9, 0.12, 1.0, 0.05, "docs/priors.md#channels-last")),
)

assert {e.codemod for e in CATALOG} == set(REGISTRY), "every registered codemod needs a catalog entry"


@dataclass(frozen=True, kw_only=True, slots=True)
class Applicability:
    """Whether a catalog patch applies to a repo, and where (or why not)."""

    entry: CatalogEntry
    spec: PatchSpec | None
    reasons: tuple[str, ...]  # per file, why it declined

    @property
    def applies(self) -> bool:
        return self.spec is not None


def editable_files(contract: Contract) -> dict[str, list[str] | None]:
    """Editable .py files → the symbols editable in them (None: the whole file)."""
    files: dict[str, list[str] | None] = {}
    for entry in contract.scope.editable:
        path, symbol = split_symbol(entry)
        if not path.endswith(".py"):
            continue
        if symbol is None:
            files[path] = None
        elif path not in files or files[path] is not None:
            files.setdefault(path, [])
            current = files[path]
            assert current is not None
            current.append(symbol)
    return files


def reach_of(contract: Contract, tree: Path | None = None) -> Reach:
    """What the contract's command can run in ``tree``; knobs are undecided (the search changes them)."""
    knobs = {k.name for k in contract.knobs} | {k.flag.lstrip("-").split("=")[0] for k in contract.knobs if k.flag}
    return analyse(tree or contract.root, command_argv(contract.workload.command, contract.workload.args),
                   knobs=knobs, workdir=contract.workload.workdir)


def changed_lines(before: str, after: str) -> list[int]:
    """1-based lines of ``before`` that a rewrite replaced, deleted or inserted after."""
    lines: list[int] = []
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    for op, i1, i2, _, _ in matcher.get_opcodes():
        if op in ("replace", "delete"):
            lines += range(i1 + 1, i2 + 1)
        elif op == "insert":
            lines.append(max(i1, 1))
    return lines


def _without_added_imports(before: str, after: str, imports: tuple[str, ...]) -> str:
    """``after`` less the import lines the codemod added: an import the rewrite needs runs wherever the
    file is imported, so it must not make a rewrite of code that never runs look reached."""
    old = set(before.splitlines())
    lines = after.splitlines(keepends=True)
    for statement in imports:
        at = next((i for i, line in enumerate(lines) if line.strip() == statement and line.strip() not in old), None)
        if at is not None:
            del lines[at]
    return "".join(lines)


def catalog_for_repo(contract: Contract, tree: Path | None = None) -> list[Applicability]:
    """Every catalog entry, with a PatchSpec targeting the editable symbols it rewrites in ``tree``.

    A rewrite whose every changed line is proven never to run from the entry point (a dead branch,
    a function nothing reached calls) does not apply: no trial is spent on it."""
    root = tree or contract.root
    reach = reach_of(contract, root)
    files: dict[str, list[str] | None] = {}
    skipped: list[str] = []
    for path, symbols in editable_files(contract).items():
        if reach.reaches_file(path):
            files[path] = symbols
        else:  # the job never imports it: no codemod is run there, no patch applies there
            skipped.append(f"{path}: not examined: nothing on the path from the entry point imports it")
    sources = {path: read_source(root / path) for path in files}
    ticker = Ticker(label="patches: running the catalog over the editable files")
    out = []
    for done, entry in enumerate(CATALOG):
        ticker.tick(done, len(CATALOG), f"catalog entries over {len(files)} files")
        targets: list[str] = []
        reasons: list[str] = list(skipped)
        for path, symbols in files.items():
            outcome = run_codemod(entry.codemod, sources[path], scope=symbols)
            if isinstance(outcome, Rewritten):
                edited = _without_added_imports(sources[path], outcome.code, outcome.added_imports)
                dead = reach.unreached(path, changed_lines(sources[path], edited))
                if dead is not None:
                    reasons.append(f"{path}: does not apply: not reached from the entry point ({dead})")
                    continue
                targets += [s if "::" in s else f"{path}::{s}" for s in outcome.symbols] or [path]
            elif isinstance(outcome, Declined):
                reasons.append(f"{path}: {outcome.reason}")
            elif isinstance(outcome, Broken):
                reasons.append(f"{path}: {outcome.error}")
        spec = entry.spec(tuple(dict.fromkeys(targets))) if targets else None
        out.append(Applicability(entry=entry, spec=spec, reasons=tuple(reasons)))
    ticker.done(f"{sum(a.applies for a in out)} of {len(CATALOG)} catalog entries apply")
    return out


def applicable_patches(contract: Contract, tree: Path | None = None) -> dict[str, PatchSpec]:
    return {a.spec.id: a.spec for a in catalog_for_repo(contract, tree) if a.spec is not None}
