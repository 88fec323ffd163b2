"""The InfraRSI witness: counts the work a trial does, from inside its interpreter (bot-owned, locked).

Python imports ``sitecustomize`` at start-up from the first directory on
``sys.path`` that has one; the executor puts this file's directory first on
``PYTHONPATH`` when a trial is witnessed, so the witness runs before any line
of the candidate's code, in repositories that never import the probe.

Without ``INFRARSI_WITNESS`` in the environment it does nothing but hand over
to the next ``sitecustomize`` on the path. With it (``report_fd,key_fd,count_step[,final_step]``)
it reads a per-trial key from ``key_fd`` (a pipe only the bot wrote to; the
descriptor is closed right after) and removes the variable, then registers
global optimizer step hooks:

- before optimizer step 1: the number of parameters the optimizer holds and,
  per parameter, its gradient norm (``None``: no gradient reached it);
- from the end of step ``count_step - 1`` to the end of step ``count_step``: a
  ``torch.utils.flop_counter.FlopCounterMode`` over the whole step (forward,
  backward, optimizer), the dtypes the matrix products ran in, and what the
  step consumed (token ids reaching an embedding, targets reaching nll_loss,
  rows of targets reaching a regression loss);
- every step: the number of optimizer steps;
- once ``torch._inductor.config`` is imported (the job compiles): ``fallback_random``, so that compiled
  code draws dropout's masks from torch's own random stream, as the eager baseline does;
- at exit: per-parameter weight norms, and a check that the hooks, the FLOP
  counter and the clocks are still the objects it started with.

A real job is configured for days and the bot ends it with SIGTERM once its
measured steps were seen, so "at exit" may never come: the report is written
at the end of optimizer step ``final_step`` (the last step the bot measures;
the weights it reads are then those every run is stopped at), or on SIGTERM
before the job's own handling of it, whichever is first — and only once.

The report is one JSON line on ``report_fd``, authenticated with HMAC-SHA256
under the key. Stdlib and torch only: it must not depend on the bot being
importable in the trial's interpreter.

The same file carries the **device memory reporter**, which every trial gets
(witnessed or not, on every executor) when ``INFRARSI_DEVICE_MEMORY`` is set:
the bot samples the host's resident set itself, which says nothing about a
GPU's memory. The reporter imports nothing heavy at start-up: once
``torch.optim.optimizer`` has been imported (by the job, whenever it does) it
registers one global optimizer step post-hook. After each optimizer step of a
process whose CUDA is initialized it reads, on the GPUs that process allocated
on, the caching allocator's peak reservation, the memory it holds once the
step is done (from step 2 on: weights, gradients and optimizer state, not a
step's activations; the least such reading is kept), and what the allocator
could have grown to (free + reserved: the device less the CUDA context, other
processes and whatever else holds it; less, where the job capped its allocator
with ``set_per_process_memory_fraction``). When a figure moved it writes a probe
``memory`` event on the trial's probe channel (``INFRARSI_PROBE_FD`` or
``INFRARSI_PROBE_FILE``), and once more at exit (after a CUDA out-of-memory
error the peak reservation is how far the job got). The variable stays set so
that every process of the job (torchrun's ranks) reports; a process that never
steps an optimizer on a GPU writes nothing.

With ``INFRARSI_STEP_CLOCK`` (``timing.source = "optimizer"``) it is also **the bot's own step clock**: one probe
``step`` event per optimizer step (``_step_clock``). Optimizer steps are torch.optim's, or — in a job that builds
no torch.optim optimizer — the hand-written updates ``_step_source`` sees; the witness counts those too.
"""

from __future__ import annotations


def _witness(config: str, steps: dict | None = None) -> None:  # noqa: C901 - one closure keeps the key out of globals
    import atexit
    import hashlib
    import hmac
    import json
    import os
    import time

    import signal
    import weakref

    fields = [int(v) for v in config.split(",")]
    report_fd, key_fd, count_step = fields[:3]
    final_step = fields[3] if len(fields) > 3 else 0
    secret = b""
    while True:
        chunk = os.read(key_fd, 64)
        if not chunk:
            break
        secret += chunk
    os.close(key_fd)
    # The channel holds the key and, after it, the step to count: drawn by the bot per trial and never in the
    # environment (which /proc/self/environ keeps after the variable is removed), so the job cannot know it.
    key, _, drawn = secret[:32], secret[32:33], secret[33:]
    if drawn.strip():
        count_step = int(drawn)
    write, dumps, new_mac, sha256 = os.write, json.dumps, hmac.new, hashlib.sha256
    with open(__file__, "rb") as fh:
        source_sha256 = sha256(fh.read()).hexdigest()

    import torch
    import torch.nn.modules.module as module_mod
    import torch.optim.optimizer as optim_mod
    import torch.utils.flop_counter as flop_mod
    from torch.utils._python_dispatch import TorchDispatchMode

    clocks = {name: getattr(time, name) for name in ("perf_counter", "monotonic", "time", "perf_counter_ns")}
    originals = {
        "FlopCounterMode": flop_mod.FlopCounterMode,
        "_FlopCounterMode.__torch_dispatch__": flop_mod._FlopCounterMode.__torch_dispatch__,
        "flop_registry": flop_mod.flop_registry,
        "Module.__call__": torch.nn.Module.__call__,
        "Tensor.backward": torch.Tensor.backward,
        "autograd.backward": torch.autograd.backward,
        "Optimizer.zero_grad": torch.optim.Optimizer.zero_grad,
        "Module.zero_grad": torch.nn.Module.zero_grad,
    }
    registry = dict(flop_mod.flop_registry)
    levers = _Levers(torch)  # dropout's masks keyed from here on; dropout and MoE counted in the counted step
    probe_funcs: dict[str, object] = {}
    try:  # the probe, when the job uses it: bound now so a later rebinding shows
        from infrarsi import probe as probe_mod

        probe_funcs = {n: getattr(probe_mod, n) for n in ("step", "event", "_clock")}
        probe_funcs["_Channel.write"] = probe_mod._Channel.write
    except Exception:  # noqa: BLE001 - a job without the probe
        probe_mod = None

    matmuls = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.convolution",
               "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_flash_attention",
               "aten._scaled_dot_product_cudnn_attention", "aten._flash_attention_forward",
               "aten._efficient_attention_forward", "aten._scaled_dot_product_flash_attention_for_cpu"}

    embeddings = {"aten.embedding", "aten.embedding_bag", "aten._embedding_bag"}
    losses = {"aten.nll_loss_forward", "aten.nll_loss2d_forward"}  # a target per token (or per sample)
    regressions = {"aten.mse_loss", "aten.l1_loss", "aten.smooth_l1_loss", "aten.huber_loss",
                   "aten.binary_cross_entropy", "aten.binary_cross_entropy_with_logits"}  # a target row per sample

    class DtypeMode(TorchDispatchMode):
        """The dtypes the counted step's matrix products ran in (autocast, fp16, fp8 show here), what the
        step consumed (token ids reaching each embedding table, targets reaching a classification loss), and
        the counted FLOPs that are not real work: products on meta or fake tensors (free), and forward
        products whose result never reached the loss (outside the differentiated graph, or a graph node the
        step's backward never ran)."""

        def __init__(self, formulas: dict) -> None:
            super().__init__()
            self.formulas = formulas  # the FLOP counter's own registry: the same formula for what is taken off
            self.dtypes: set[str] = set()
            self.indexed: dict[tuple, int] = {}  # per embedding table, the ids it was indexed with
            self.targets = 0
            self.excluded: dict[str, dict[str, int]] = {"meta": {}, "unreached": {}, "no_grad": {}}
            self.pending: list = []  # forward products whose output's graph node is not attached yet
            self.forward: list = []  # (graph node, flops, op) of each forward product on real tensors
            self.ran: dict[int, object] = {}  # graph nodes the backward ran (held: their ids stay unique)

        def take_off(self, why: str, name: str, flops: int) -> None:
            self.excluded[why][name] = self.excluded[why].get(name, 0) + int(flops)

        def resolve(self) -> None:
            """Autograd attaches a product's graph node after dispatch returns: look now. A result already
            freed was consumed by nothing (the next operation would hold it), so it never reached the loss."""
            for ref, flops, name in self.pending:
                out = ref()
                node = getattr(out, "grad_fn", None) if out is not None else None
                if out is None:
                    self.take_off("unreached", name, flops)
                elif node is None:
                    self.take_off("no_grad", name, flops)
                else:
                    self.forward.append((node, flops, name))
            self.pending.clear()

        def settle(self) -> None:
            """At the end of the counted step: forward products whose node the backward never ran."""
            self.resolve()
            for node, flops, name in self.forward:
                if id(node) not in self.ran:
                    self.take_off("unreached", name, flops)
            self.forward.clear()
            self.ran.clear()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            if self.pending:
                self.resolve()
            packet = func.overloadpacket
            name = str(packet)
            kwargs = kwargs or {}
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if name in matmuls:
                for a in tensors:
                    if a.is_floating_point():
                        self.dtypes.add(str(a.dtype).removeprefix("torch."))
                # read at every product of the counted step too: a setting lowered around the products and
                # restored before the optimizer's hooks read it shows here (the job cannot know which step)
                note(math_timeline, count_step, math_settings())
            elif name in embeddings and len(args) > 1 and isinstance(args[1], torch.Tensor):
                table = args[0]
                key = (tuple(table.shape), table.data_ptr() if table.device.type != "meta" else id(table))
                self.indexed[key] = self.indexed.get(key, 0) + int(args[1].numel())
            elif name in losses and len(args) > 1 and isinstance(args[1], torch.Tensor):
                self.targets += int(args[1].numel())
            elif name in regressions and len(args) > 1 and isinstance(args[1], torch.Tensor):
                self.targets += int(args[1].shape[0]) if args[1].dim() else 1
            out = func(*args, **kwargs)
            formula = self.formulas.get(packet)
            if formula is not None:
                try:
                    flops = int(formula(*args, **kwargs, out_val=out))
                except Exception:  # noqa: BLE001 - a formula that cannot read these arguments: counted as is
                    flops = 0
                node = torch._C._current_autograd_node()
                if any(a.device.type == "meta" or type(a).__name__ == "FakeTensor" for a in tensors):
                    self.take_off("meta", name, flops)
                elif node is not None:
                    self.ran[id(node)] = node
                elif flops:
                    first = out[0] if isinstance(out, (tuple, list)) and out else out
                    if isinstance(first, torch.Tensor):
                        self.pending.append((weakref.ref(first), flops, name))
            return out

    state: dict[str, object] = {"steps": 0, "params": None, "grads": None, "flops": None, "by_op": {},
                                "dtypes": [], "counter": None, "dtype_mode": None, "counted_s": None,
                                "flops_excluded": {}}
    # Every optimizer step, kept to the step the report is written at (the bot's last measured one): when it
    # ended on the bot's clock, the loss that reached backward() during it, each optimizer's settings when
    # they changed, and the settings that decide how float32 products are computed when they changed.
    step_t: list[float] = []
    backward_roots: list[list] = [[]]  # per step in progress, the scalar roots passed to backward()
    optimizers: list = []  # every optimizer that stepped, in the order it first did (strong references)
    opt_timeline: dict[int, list] = {}  # id(optimizer) -> [[from step, settings], ...]
    opt_members: dict[int, list] = {}  # id(optimizer) -> per group, the shapes of its parameters (at step 1)
    math_timeline: list = []  # [[from step, settings], ...]
    cap = max(final_step, count_step) + 2 if final_step else 100_000

    def flat_params(opt) -> list:  # noqa: ANN001
        return [p for group in opt.param_groups for p in group["params"]]

    def plain(value):  # noqa: ANN001, ANN202
        """A group setting as JSON (a 0-d tensor lr as its number); what cannot be said plainly, by its type."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, torch.Tensor):
            return float(value.detach().float().reshape(-1)[0]) if value.numel() == 1 else f"tensor{list(value.shape)}"
        return type(value).__name__

    # How a group is run, not what it computes: never part of the task (foreach/fused kernels, CUDA graphs).
    implementation = {"params", "foreach", "fused", "capturable", "differentiable"}

    def group_settings(opt) -> list:  # noqa: ANN001
        return [{k: plain(v) for k, v in sorted(g.items()) if k not in implementation} for g in opt.param_groups]

    def math_settings() -> dict:
        """What decides how float32 products are computed (reduced-precision products inside float32 tensors:
        TF32, bf16 passes), and the default dtype; a setting this torch lacks is left out."""
        out: dict[str, object] = {}
        try:
            out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        except Exception:  # noqa: BLE001 - torch refuses to answer when the legacy and new APIs were mixed
            out["float32_matmul_precision"] = "mixed"
        backends = torch.backends
        for path in ("cuda.matmul.allow_tf32", "cudnn.allow_tf32", "cuda.matmul.allow_bf16_reduced_precision_reduction",
                     "cuda.matmul.allow_fp16_reduced_precision_reduction", "fp32_precision",
                     "cuda.matmul.fp32_precision", "cudnn.fp32_precision", "cudnn.conv.fp32_precision",
                     "cudnn.rnn.fp32_precision", "mkldnn.fp32_precision", "mkldnn.matmul.fp32_precision",
                     "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision"):
            obj = backends
            try:
                for part in path.split("."):
                    obj = getattr(obj, part)
            except Exception:  # noqa: BLE001 - not in this torch
                continue
            out[path] = obj if isinstance(obj, (bool, int, float, str)) else str(obj)
        out["default_dtype"] = str(torch.get_default_dtype()).removeprefix("torch.")
        return out

    def note(timeline: list, step: int, value) -> None:  # noqa: ANN001
        if not timeline or timeline[-1][1] != value:
            timeline.append([step, value])

    def pre(opt, args, kwargs) -> None:  # noqa: ANN001
        step = state["steps"] + 1
        if state["steps"] == 0 and state["grads"] is None:
            params = flat_params(opt)
            with torch.no_grad():
                state["grads"] = [None if p.grad is None else float(p.grad.detach().float().norm()) for p in params]
            state["shapes"] = [list(p.shape) for p in params]
            state["proj0"] = projections(params)
        if step > cap:
            return
        key = id(opt)
        if key not in opt_timeline:
            optimizers.append(opt)
            opt_timeline[key] = []
            opt_members[key] = [[list(p.shape) for p in g["params"]] for g in opt.param_groups]
        note(opt_timeline[key], step, group_settings(opt))
        note(math_timeline, step, math_settings())

    #: Random directions per parameter: the update's projection on each moves linearly with it, and together
    #: they measure each parameter's own update (a frozen bias shows, however small its share of the whole).
    DIRECTIONS = 3

    def projections(params: list) -> list[list[float]]:
        """Per parameter, its dot products with ``DIRECTIONS`` fixed random directions."""
        out = []
        with torch.no_grad():
            for i, p in enumerate(params):
                gen = torch.Generator(device=p.device).manual_seed(0x5EED + i)
                w = p.detach().float()
                row = []
                for _ in range(DIRECTIONS):
                    r = torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32)
                    row.append(float((w * r).sum()))
                out.append(row)
        return out

    state_dtypes: dict[int, dict[str, set]] = {}  # id(optimizer) -> state key -> dtypes seen

    def note_state_dtypes() -> None:
        """The dtype of every optimizer-state tensor, now: at the report, and in the counted step's backward
        (between steps, where a patch that keeps its state low and restores it around step() shows)."""
        for opt in optimizers:
            seen = state_dtypes.setdefault(id(opt), {})
            for per_param in opt.state.values():
                for k, v in (per_param.items() if isinstance(per_param, dict) else ()):
                    if isinstance(v, torch.Tensor) and v.dim() > 0:
                        seen.setdefault(str(k), set()).add(str(v.dtype).removeprefix("torch."))

    real_backward = torch.autograd.backward

    def backward(tensors, *args, **kwargs):  # noqa: ANN001, ANN202
        """torch.autograd.backward (Tensor.backward calls it): each scalar root is the loss this step
        differentiates; kept on its device, read once at the report (no synchronisation per step)."""
        if steps is not None:
            steps["settle"]()  # a hand-written update ended before this backward(): its roots are the next step's
        if len(step_t) < cap:
            roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors) \
                if isinstance(tensors, (tuple, list)) else []
            for root in roots:
                if isinstance(root, torch.Tensor) and root.numel() == 1 and root.is_floating_point():
                    backward_roots[-1].append(root.detach().reshape(()).float())
        if state["counter"] is not None:
            note_state_dtypes()
        return real_backward(tensors, *args, **kwargs)

    backward.__wrapped__ = real_backward  # type: ignore[attr-defined]
    torch.autograd.backward = backward
    originals["autograd.backward"] = backward

    # Attention kernels this torch's registry leaves out (the CPU flash kernel): counted with the
    # registry's own SDPA formulas, so a switch to SDPA does not look like less work.
    custom = {}
    aten = torch.ops.aten
    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu",
                           lambda q, k, v, *a, out_shape=None, **kw: flop_mod.sdpa_flop_count(q, k, v)),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward",
                           lambda g, q, k, v, *a, out_shape=None, **kw: flop_mod.sdpa_backward_flop_count(g, q, k, v))):
        op = getattr(aten, name, None)
        if op is not None and op not in registry and getattr(op, "default", None) not in registry:
            custom[op] = formula

    def start_count() -> None:
        counter = flop_mod.FlopCounterMode(display=False, custom_mapping=custom)
        dmode = DtypeMode(counter.flop_registry)
        counter.__enter__()
        dmode.__enter__()
        levers.start()
        state["counter"], state["dtype_mode"], state["t0"] = counter, dmode, clocks["perf_counter"]()

    def stop_count() -> None:
        counter, dmode = state["counter"], state["dtype_mode"]
        levers.stop()
        dmode.__exit__(None, None, None)
        counter.__exit__(None, None, None)
        state["counted_s"] = clocks["perf_counter"]() - state["t0"]
        dmode.settle()
        excluded = {why: sum(ops.values()) for why, ops in dmode.excluded.items()}
        state["flops"] = max(0, int(counter.get_total_flops()) - sum(excluded.values()))
        by_op: dict[str, int] = {}
        for ops in counter.get_flop_counts().values():
            for op, n in ops.items():
                by_op[str(op)] = max(by_op.get(str(op), 0), int(n))
        for ops in dmode.excluded.values():  # only real work that reached the loss is the step's work
            for op, n in ops.items():
                by_op[op] = by_op.get(op, 0) - n
        state["by_op"] = {op: n for op, n in by_op.items() if n > 0}
        state["flops_excluded"] = {why: n for why, n in excluded.items() if n}
        state["dtypes"] = sorted(dmode.dtypes)
        state["tokens_in"] = max(dmode.indexed.values(), default=0) or None
        state["targets_in"] = dmode.targets or None
        state["counter"] = None

    def post(opt, args, kwargs) -> None:  # noqa: ANN001
        state["steps"] += 1
        n = state["steps"]
        if n <= cap:
            step_t.append(clocks["perf_counter"]())
            backward_roots.append([])
        if n == 1:
            state["params"] = flat_params(opt)  # strong references: the weights are read at exit
        if n == count_step - 1:
            start_count()
        elif n == count_step and state["counter"] is not None:
            stop_count()
        if n == final_step:
            report("step")  # the bot stops the job after this step: exit may never come

    pre_handle = optim_mod.register_optimizer_step_pre_hook(pre)
    post_handle = optim_mod.register_optimizer_step_post_hook(post)
    if steps is not None:
        _hand_witness(steps, state, post, lambda step: note(math_timeline, step, math_settings()),
                      projections, torch)
    if count_step <= 1:
        start_count()  # counts from here: model construction runs no matrix products worth a step

    def tampered() -> list[str]:
        found = []
        current = {
            "FlopCounterMode": flop_mod.FlopCounterMode,
            "_FlopCounterMode.__torch_dispatch__": flop_mod._FlopCounterMode.__torch_dispatch__,
            "flop_registry": flop_mod.flop_registry,
            "Module.__call__": torch.nn.Module.__call__,
            "Tensor.backward": torch.Tensor.backward,
            "autograd.backward": torch.autograd.backward,
            "Optimizer.zero_grad": torch.optim.Optimizer.zero_grad,
            "Module.zero_grad": torch.nn.Module.zero_grad,
        }
        found += [f"{name} was replaced" for name, obj in originals.items() if current[name] is not obj]
        if dict(flop_mod.flop_registry) != registry:
            found.append("torch.utils.flop_counter.flop_registry was edited")
        found += [f"time.{name} was replaced" for name, fn in clocks.items() if getattr(time, name) is not fn]
        if optim_mod._global_optimizer_pre_hooks.get(pre_handle.id) is not pre:
            found.append("the witness's optimizer pre-hook was removed")
        if optim_mod._global_optimizer_post_hooks.get(post_handle.id) is not post:
            found.append("the witness's optimizer post-hook was removed")
        if getattr(atexit, "_ncallbacks", lambda: 1)() == 0:  # the report may come before exit: look anyway
            found.append("the witness's exit handler was removed (atexit cleared)")
        if probe_mod is not None:
            now = {n: getattr(probe_mod, n) for n in ("step", "event", "_clock")}
            now["_Channel.write"] = probe_mod._Channel.write
            found += [f"infrarsi.probe.{n} was replaced" for n, fn in probe_funcs.items() if now[n] is not fn]
        return found

    def report(at: str = "exit") -> None:
        if state.get("reported"):
            return
        state["reported"] = True
        if state["counter"] is not None:  # the job ended inside the counted step
            stop_count()
        params = state["params"] or []
        with torch.no_grad():
            weights = [float(p.detach().float().norm()) for p in params]
        proj0 = state.get("proj0") or []
        proj1 = projections(params) if len(proj0) == len(params) else []
        updates = [[b - a for a, b in zip(r0, r1)] for r0, r1 in zip(proj0, proj1)]
        with torch.no_grad():
            losses = [float(sum(float(r) for r in roots)) if roots else None for roots in backward_roots[:len(step_t)]]
            note_state_dtypes()
            states = [{k: sorted(v) for k, v in sorted(state_dtypes.get(id(opt), {}).items())} for opt in optimizers]
        optimizer = [{"family": type(opt).__name__, "timeline": opt_timeline[id(opt)],
                      "members": opt_members[id(opt)],
                      "members_at_end": [[list(p.shape) for p in g["params"]] for g in opt.param_groups],
                      "state_dtypes": st} for opt, st in zip(optimizers, states)]
        body = {"v": 1, "source_sha256": source_sha256, "pid": os.getpid(), "rank": os.environ.get("RANK"),
                "optimizer_steps": state["steps"], "count_step": count_step, "flops": state["flops"],
                "flops_by_op": state["by_op"], "matmul_dtypes": state["dtypes"], "counted_s": state["counted_s"],
                "params": len(state.get("shapes") or []),
                "param_elements": sum(_numel(s) for s in state.get("shapes") or []),
                "grad_norms": state["grads"], "weight_norms": weights, "update_proj": [u[0] for u in updates],
                "update_projs": updates, "tampered": tampered(),
                "at": at, "t": clocks["perf_counter"](), "tokens_in": state.get("tokens_in"),
                "targets_in": state.get("targets_in"), "flops_excluded": state["flops_excluded"],
                "step_t": step_t, "backward_loss": losses, "optimizer": optimizer, "math": math_timeline,
                "steps_by": "hand" if state.get("hand") else "optimizer",
                **levers.fields()}
        text = dumps(body, separators=(",", ":"))
        mac = new_mac(key, text.encode(), "sha256").hexdigest()
        try:
            write(report_fd, (dumps({"witness": text, "mac": mac}) + "\n").encode())
        except OSError:
            pass  # the bot then has no report: the trial is invalid

    atexit.register(report)

    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame) -> None:  # noqa: ANN001
        report("sigterm")
        handler = previous if callable(previous) else None
        if handler is not None:
            handler(signum, frame)
        elif previous != signal.SIG_IGN:  # the default action: die of SIGTERM, as without the witness
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:
        pass  # not the main thread: the step-end report still comes

    def eager_random(config) -> None:  # noqa: ANN001
        # Inductor draws dropout's masks from its own generator, so a compiled step's masks differ from the
        # eager step's under the same seed and the witnessed comparison would blame an honest torch.compile.
        # In a witnessed run only (timed runs keep inductor's fast generator), compiled code draws from
        # torch's own stream, as eager code does.
        config.fallback_random = True

    _after_import("torch._inductor.config", eager_random)


def _hand_witness(steps: dict, state: dict, post, note_math, projections, torch) -> None:  # noqa: ANN001
    """The witness's reads at a hand-written update's steps (``_step_source``), as at torch.optim's: before step 1
    the parameters and their weights (at its first backward(), before any update), after each of step 1's
    backward() calls their gradient norms (the last is what step 1 accumulated, before any clipping), and at
    each step's end what the optimizer post-hook does (count, clock, the counted step, the report)."""
    import types

    def opened(step: int, params: list) -> None:
        note_math(step)
        if step == 1 and state["grads"] is None:
            state["hand"] = True
            state["shapes"] = [list(p.shape) for p in params]
            state["proj0"] = projections(params)
            state["hand_params"] = params

    def backward_done(step: int, params: list) -> None:
        if step == 1 and state.get("hand"):
            with torch.no_grad():
                state["hand_grads"] = [None if p.grad is None else float(p.grad.detach().float().norm())
                                       for p in state["hand_params"]]

    def ended(step: int, params: list, roots: list) -> None:
        del roots
        if step == 1 and state.get("hand"):
            state["grads"] = state.get("hand_grads")
        post(types.SimpleNamespace(param_groups=[{"params": state.get("hand_params") or params}], state={}), (), {})

    steps["on"]("open", opened)
    steps["on"]("backward", backward_done)
    steps["on"]("end", ended)


def _step_source() -> dict:  # noqa: C901 - one closure: nothing of it in module globals
    """The job's optimizer steps where torch.optim does not say them: a hand-written update
    (``p.data.add_(p.grad, alpha=-lr)``, PyTorch's word-language-model example) is a group of backward() calls
    ended by the update, seen as the parameters' gradients being cleared after them: ``Module.zero_grad`` (the
    step ends there, before the next forward), or, for a job that clears them some other way, found cleared (or
    changed in place) at the next backward() (the step then ends there). Counted only while the job has built
    no ``torch.optim`` optimizer (an optimizer's class is hooked the moment one is built): then torch.optim's
    own step hooks say when a step ends.

    The parameters are the ``nn.Module`` parameters the job registers (a global registration hook, in the
    order they are registered: the same in every run of the job). Returns hooks: ``on(kind, fn)`` for "open"
    (a step's first backward() is about to run: ``fn(step, params)``), "backward" (after each backward():
    ``fn(step, params)``) and "end" (``fn(step, params, roots)``: the scalar losses passed to backward() in the
    step); ``settle()`` ends a step whose gradients were cleared (the witness asks before it reads a backward's
    roots); ``keep_roots()`` and ``take_roots()`` for the step clock (the losses since the last step, torch.optim's
    or hand-written). Nothing is imported here: hooks go in as the job imports torch."""
    import weakref

    subscribers: dict[str, list] = {"open": [], "backward": [], "end": []}
    state: dict[str, object] = {"open": False, "steps": 0, "optim": False, "keep": False}
    registered: list = []  # weakrefs to parameters, in registration order
    seen: set[int] = set()
    snapshot: dict[int, tuple[int, int]] = {}  # id(param) -> (id(grad), grad._version) after the last backward()
    roots: list = []

    def torch_optim() -> bool:
        """Whether the job has built a torch.optim optimizer (its class's step is then hooked for ever)."""
        if not state["optim"]:
            import sys

            module = sys.modules.get("torch.optim.optimizer")
            base = getattr(module, "Optimizer", None)
            todo = [base] if base is not None else []
            while todo:
                cls = todo.pop()
                if getattr(cls.__dict__.get("step"), "hooked", False):
                    state["optim"] = True
                    break
                todo += cls.__subclasses__()
        return bool(state["optim"])

    def params() -> list:
        alive = [r() for r in registered]
        return [p for p in alive if p is not None and p.requires_grad]

    def cleared() -> bool:
        for p in params():
            before = snapshot.get(id(p))
            if before is None:
                continue
            grad = p.grad
            if grad is None or (id(grad), grad._version) != before:
                return True
        return False

    def end() -> None:
        state["steps"] = int(state["steps"]) + 1  # type: ignore[call-overload]
        state["open"] = False
        snapshot.clear()
        taken = list(roots)
        roots.clear()
        current = params()
        for fn in subscribers["end"]:
            fn(state["steps"], current, taken)

    def settle() -> None:
        if state["open"] and not torch_optim() and cleared():
            end()

    def on_register(module, name, param) -> None:  # noqa: ANN001
        if param is not None and id(param) not in seen:
            seen.add(id(param))
            registered.append(weakref.ref(param))

    def install_module(module) -> None:  # noqa: ANN001
        try:
            module.register_module_parameter_registration_hook(on_register)
        except Exception:  # noqa: BLE001 - a torch without the hook: no hand-written steps are seen
            return
        real_zero_grad = module.Module.zero_grad

        def zero_grad(self, *args, **kwargs):  # noqa: ANN001, ANN202
            if state["open"] and not torch_optim():
                end()  # the update is done: the step ends before the next one's forward
            return real_zero_grad(self, *args, **kwargs)

        zero_grad.__wrapped__ = real_zero_grad  # type: ignore[attr-defined]
        zero_grad.__doc__ = real_zero_grad.__doc__
        module.Module.zero_grad = zero_grad

    def install_autograd(autograd) -> None:  # noqa: ANN001
        real_backward = autograd.backward

        def backward(tensors, *args, **kwargs):  # noqa: ANN001, ANN202
            hand = not torch_optim()
            if hand:
                settle()
            if state["keep"]:
                listed = list(tensors) if isinstance(tensors, (tuple, list)) else [tensors]
                roots.extend(r.detach().reshape(()) for r in listed if hasattr(r, "grad_fn") and r.numel() == 1
                             and r.is_floating_point())
            if hand and not state["open"]:
                state["open"] = True
                for fn in subscribers["open"]:
                    fn(int(state["steps"]) + 1, params())  # type: ignore[call-overload]
            out = real_backward(tensors, *args, **kwargs)
            if hand:
                current = params()
                snapshot.clear()
                snapshot.update({id(p): (id(p.grad), p.grad._version) for p in current if p.grad is not None})
                for fn in subscribers["backward"]:
                    fn(int(state["steps"]) + 1, current)  # type: ignore[call-overload]
            return out

        backward.__wrapped__ = real_backward  # type: ignore[attr-defined]
        backward.__doc__ = real_backward.__doc__
        autograd.backward = backward

    def take_roots() -> list:
        taken = list(roots)
        roots.clear()
        return taken

    _after_import("torch.nn.modules.module", install_module)
    _after_import("torch.autograd", install_autograd)
    return {"on": lambda kind, fn: subscribers[kind].append(fn), "settle": settle, "take_roots": take_roots,
            "keep_roots": lambda: state.update(keep=True)}


def _probe_channel():  # noqa: ANN202
    """``channel()``: the trial's probe channel (``INFRARSI_PROBE_FD``, else ``INFRARSI_PROBE_FILE``) as a descriptor,
    opened at the first call; None when there is none."""
    import os

    state: dict[str, int | None] = {"fd": None}

    def channel() -> int | None:
        if state["fd"] is None:
            fd, path = os.environ.get("INFRARSI_PROBE_FD"), os.environ.get("INFRARSI_PROBE_FILE")
            try:
                state["fd"] = int(fd) if fd else (os.open(path, os.O_WRONLY | os.O_APPEND) if path else -1)
            except (OSError, ValueError):
                state["fd"] = -1
        return None if state["fd"] == -1 else state["fd"]

    return channel


def _probe_writer():  # noqa: ANN202
    """``send(record)``: one JSON line on the probe channel, tagged with the process's ``RANK``; nothing when there
    is no channel or the bot stopped listening (it ends the job after its measured steps)."""
    import json
    import os

    channel = _probe_channel()
    rank = os.environ.get("RANK")

    def send(record: dict) -> None:
        fd = channel()
        if fd is None:
            return
        if rank is not None and rank.isdigit():
            record["rank"] = int(rank)
        try:
            os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        except OSError:
            pass

    return send


def _step_clock(steps: dict, tokens: str) -> None:  # noqa: C901 - one closure: nothing of it in module globals
    """The bot's own step clock (``timing.source = "optimizer"``, for a job whose printed lines are sparse or
    carry evaluations): one probe ``step`` event per optimizer step, torch.optim's (a global post-hook) or
    hand-written (``_step_source``), on the trial's probe channel, carrying the tokens the contract fixes and
    the loss that reached backward() in the step when it costs nothing to say (a loss on the CPU; on a GPU it
    is copied without waiting and sent in a ``loss`` event once the copy is done). The bot stamps each event
    on arrival, as any other."""
    import atexit
    import sys
    import time

    state: dict[str, object] = {"n": 0}
    pending: list = []  # (step, host tensor, CUDA event) of losses still being copied
    send = _probe_writer()
    clock = time.perf_counter
    try:
        fixed = int(tokens)
    except ValueError:
        fixed = None
    steps["keep_roots"]()

    def flush(wait: bool) -> None:
        while pending and (wait or pending[0][2].query()):
            step, host, event = pending.pop(0)
            try:
                event.synchronize()
                send({"event": "loss", "step": step, "loss": float(host)})
            except Exception:  # noqa: BLE001 - a lost device: the loss is not said
                pass

    def loss_of(step: int, roots: list) -> float | None:
        if not roots:
            return None
        try:
            if all(r.device.type == "cpu" for r in roots):
                return float(sum(float(r) for r in roots))
            torch = sys.modules["torch"]
            total = torch.stack([r.float() for r in roots]).sum()
            host = torch.empty((), dtype=torch.float32, pin_memory=True)
            host.copy_(total, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            pending.append((step, host, event))
        except Exception:  # noqa: BLE001 - a loss that cannot be read cheaply is not said
            pass
        return None

    def emit(by: str, roots: list | None = None) -> None:
        state["n"] = n = int(state["n"]) + 1  # type: ignore[call-overload]
        if pending:
            flush(wait=False)
        record: dict[str, object] = {"event": "step", "step": n, "by": by, "t": clock()}
        if fixed is not None:
            record["tokens"] = fixed
        loss = loss_of(n, steps["take_roots"]() if roots is None else roots)
        if loss is not None:
            record["loss"] = loss
        send(record)

    def post(opt, args, kwargs) -> None:  # noqa: ANN001
        emit("optimizer")

    def install(module) -> None:  # noqa: ANN001
        try:
            module.register_optimizer_step_post_hook(post)
        except Exception:  # noqa: BLE001 - a torch without global optimizer hooks: hand-written steps only
            pass

    steps["on"]("end", lambda step, params, roots: emit("hand", roots))
    _after_import("torch.optim.optimizer", install)
    atexit.register(lambda: flush(wait=True))


class _Levers:  # noqa: C901 - what the witness reads of dropout and of Mixture-of-Experts layers
    """Dropout and Mixture-of-Experts as the witness sees them (docs/trials.md, "Dropout" and "Mixture of
    Experts").

    *Dropout's masks, keyed.* From start-up, every dropout mask (``bernoulli_`` with a probability, which
    eager dropout on a CPU runs, and ``native_dropout``, which CUDA and compiled code run) is drawn from a
    generator seeded by one draw of the job's own CPU stream: each site consumes exactly one number of the
    job's stream whatever its kernel or shape, so a rewrite that moves the same dropout into another kernel
    that reaches these ops (SDPA's math path, a compiled graph, a dropout-add written out) draws the same masks
    as the baseline, and checkpointing's restored stream redraws them. Only witnessed runs key masks: both
    arms of a verification are witnessed.

    *In the counted step:* each dropout site's probability, the shape it applies to (less the batch dimension)
    and elements, and whether its mask was keyed or drawn inside a fused attention kernel (``kernel``); per
    Mixture-of-Experts layer (found by its structure: experts as a list of one class or as stacked weights,
    and a linear router with one output per expert), the token rows its router saw, the assignments its
    top-k chose, the rows each expert's first matrix product received (padding rows of zeros do not count),
    hence the assignments dropped and, in a forward that dropped some, the capacity (the fullest expert's rows:
    a capacity factor times the forward's tokens, whatever the step), and its auxiliary losses: each scalar
    the layer's forward leaves unconsumed
    (a load-balancing loss, a z-loss, wherever it is collected), with the weight at which it reached the loss
    that backward() differentiates (its gradient) and its value."""

    _SDPA = {"aten._scaled_dot_product_flash_attention": 3, "aten._scaled_dot_product_flash_attention_for_cpu": 3,
             "aten._scaled_dot_product_efficient_attention": 5, "aten._scaled_dot_product_cudnn_attention": 5,
             "aten._flash_attention_forward": 7, "aten._efficient_attention_forward": 6}
    _MATMULS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm")
    _COPIES = ("aten._to_copy", "aten.clone")

    def __init__(self, torch) -> None:  # noqa: ANN001
        import warnings
        import weakref

        self.torch, self.ref = torch, weakref.ref
        self.sites: dict = {}  # (p, trailing shape, kind) -> elements
        self.layers: list = []  # MoE layer records, in the order they first ran in the counted step
        self.kinds: dict = {}  # id(module) -> its layer record, or None (not an MoE layer)
        self.routers: dict = {}  # id(router module) -> its layer's record
        self.weights: dict = {}  # storage address -> (record, expert or None, stride of dim 0, base offset, ref)
        self.counts: list = []  # (record, forward, expert or None, rows tensor) of the counted step's expert products
        self.active: list = []  # per MoE forward in progress: its record, its open scalars, whether topk ran
        self.held: list = []  # modules classified (strong references: their ids stay theirs)
        self.handles: list = []
        self.mode = None
        self.library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel": on purpose
            for key in ("CPU", "CUDA"):
                try:
                    self.library.impl("bernoulli_.float", self._bernoulli, key)
                    self.library.impl("native_dropout", self._native_dropout, key)
                except Exception:  # noqa: BLE001 - a build without that backend
                    pass

    # -- keyed masks, every step -------------------------------------------------------------------------
    def _keep(self, shape, keep: float, device, generator):  # noqa: ANN001, ANN202
        torch = self.torch
        if generator is None:
            seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))  # one draw of the job's CPU stream
            generator = torch.Generator(device=device).manual_seed(seed)
        return torch.rand(shape, generator=generator, device=device, dtype=torch.float32) < keep

    def _bernoulli(self, tensor, p=0.5, generator=None):  # noqa: ANN001, ANN202
        return tensor.copy_(self._keep(tensor.shape, float(p), tensor.device, generator))

    def _native_dropout(self, tensor, p, train):  # noqa: ANN001, ANN202
        torch = self.torch
        if train is not None and not train:
            return tensor.clone(), torch.ones_like(tensor, dtype=torch.bool)
        keep = 1.0 - float(p)
        if keep <= 0:
            return tensor * 0.0, torch.zeros_like(tensor, dtype=torch.bool)
        mask = self._keep(tensor.shape, keep, tensor.device, None)
        return tensor * mask * (1.0 / keep), mask

    # -- the counted step ---------------------------------------------------------------------------------
    def start(self) -> None:
        torch, levers = self.torch, self
        from torch.utils._python_dispatch import TorchDispatchMode
        import torch.nn.modules.module as module_mod

        class LeverMode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
                kwargs = kwargs or {}
                forward = torch._C._current_autograd_node() is None
                if forward:
                    levers._before(str(func), args, kwargs)
                out = func(*args, **kwargs)
                if forward:
                    levers._after(str(func.overloadpacket), args, kwargs, out)
                return out

        self.handles = [module_mod.register_module_forward_pre_hook(self._pre),
                        module_mod.register_module_forward_hook(self._post)]
        self.mode = LeverMode()
        self.mode.__enter__()

    def stop(self) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
        for handle in self.handles:
            handle.remove()
        self.handles = []
        per_forward: dict = {}  # id(frame) -> (record, frame, rows per expert in that forward)
        with self.torch.no_grad():
            for record, frame, expert, rows in self.counts:
                seen = per_forward.setdefault(id(frame), (record, frame, [0] * record["experts"]))[2]
                if expert is None:
                    for e, n in enumerate(rows.tolist()[: record["experts"]]):
                        seen[e] += int(n)
                elif 0 <= expert < record["experts"]:
                    seen[expert] += int(rows)
        for record, frame, seen in per_forward.values():
            record["processed"] = [a + b for a, b in zip(record["processed"], seen)]
            if frame is not None and frame["assigned"] > sum(seen):  # assignments dropped: the fullest expert is
                record["capacity"].add(max(seen))  # at its capacity, which the step cannot move
        self.counts = []
        self.weights = {}

    def _site(self, p: float, tensor, kind: str, trailing=None, elements=None) -> None:  # noqa: ANN001
        if p <= 0:
            return
        shape = tuple(tensor.shape)
        key = (round(p, 6), tuple(trailing if trailing is not None else shape[1:]), kind)
        n = elements if elements is not None else tensor.numel()
        self.sites[key] = self.sites.get(key, 0) + int(n)

    def _before(self, name: str, args, kwargs) -> None:  # noqa: ANN001
        torch = self.torch
        if name == "aten.bernoulli_.float" and args and len(args) > 1:
            self._site(1.0 - float(args[1]), args[0], "keyed")
        elif name.startswith("aten.native_dropout.") and len(args) > 1:
            if len(args) < 3 or args[2] is None or args[2]:
                self._site(float(args[1]), args[0], "keyed")
        else:
            packet = name.rsplit(".", 1)[0]
            at = self._SDPA.get(packet)
            if at is not None and len(args) > 1 and isinstance(args[0], torch.Tensor):
                p = kwargs.get("dropout_p", args[at] if len(args) > at else 0.0)
                q, k = args[0], args[1]
                if isinstance(p, (int, float)) and p > 0 and q.dim() >= 3:
                    lead = tuple(q.shape[:-2])
                    trailing = (*lead[1:], q.shape[-2], k.shape[-2])
                    n = 1
                    for d in (*lead, q.shape[-2], k.shape[-2]):
                        n *= int(d)
                    self._site(float(p), q, "kernel", trailing=trailing, elements=n)

    # -- Mixture of Experts ---------------------------------------------------------------------------------
    def _address(self, tensor):  # noqa: ANN001, ANN202
        try:
            return tensor.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - a tensor without storage (meta, fake)
            return None

    def _layer(self, module):  # noqa: ANN001, ANN202
        """The layer record of ``module`` when it is an MoE layer (else None), cached by module."""
        key = id(module)
        if key in self.kinds:
            return self.kinds[key]
        self.held.append(module)
        try:
            record = self._classify(module)
        except Exception:  # noqa: BLE001 - a module this reading does not understand is not an MoE layer
            record = None
        self.kinds[key] = record
        return record

    def _classify(self, module):  # noqa: ANN001, ANN202, C901
        torch = self.torch
        nn = torch.nn
        children = dict(module.named_children())
        listed, count, stacked = None, 0, []
        for name, child in children.items():
            if isinstance(child, nn.ModuleList) and len(child) >= 2 and len({type(c) for c in child}) == 1 \
                    and any(True for _ in child[0].parameters()):
                listed, count = name, len(child)
                break
        if listed is None:
            stacked = [p for p in module.parameters(recurse=False) if p.dim() >= 3 and p.shape[0] >= 2]
            for child in children.values():
                if stacked:
                    break
                held = [p for p in child.parameters(recurse=False) if p.dim() >= 3 and p.shape[0] >= 2]
                if held and not any(isinstance(m, nn.Linear) and m.out_features == held[0].shape[0]
                                    for m in child.modules()):
                    stacked = held  # the experts' weights in a holder of their own (its router is a sibling)
            count = int(stacked[0].shape[0]) if stacked else 0
        if count < 2:
            return None
        router = None
        for name, sub in module.named_modules():
            depth = name.count(".") + 1 if name else 0
            if sub is module or depth > 2 or (listed is not None and name.split(".")[0] == listed):
                continue
            if isinstance(sub, nn.Linear) and sub.out_features == count:
                router = sub
                break
        if router is None:
            return None
        width = router.in_features
        record = {"layer": type(module).__name__, "experts": count, "tokens": 0, "assigned": 0, "topk": False,
                  "processed": [0] * count, "aux": [], "capacity": set(), "forwards": 0}
        if listed is not None:
            for e, expert in enumerate(children[listed]):
                first = next((p for p in expert.parameters() if p.dim() == 2 and width in p.shape), None)
                if first is None:
                    return None
                self.weights[self._address(first)] = (record, e, 0, 0, None)
        else:
            first = next((p for p in stacked if width in p.shape[1:]), stacked[0])
            self.weights[self._address(first)] = (record, None, first.stride(0), first.storage_offset(), None)
        self.routers[id(router)] = record
        self.held.append(router)
        return record

    def _expert(self, tensor):  # noqa: ANN001, ANN202
        """(record, expert index or None when ``tensor`` holds every expert's weight) of an expert's first
        weight (or a copy of it: autocast's cast, a stack of the experts' weights), else None."""
        if not isinstance(tensor, self.torch.Tensor):
            return None
        hit = self.weights.get(self._address(tensor))
        if hit is None:
            return None
        record, expert, stride, base, ref = hit
        if ref is not None and ref() is None:  # the copy is gone: its address may hold something else now
            self.weights.pop(self._address(tensor), None)
            return None
        if expert is not None:
            return record, expert
        if tensor.dim() >= 3 and tensor.shape[0] == record["experts"]:
            return record, None
        return record, (tensor.storage_offset() - base) // stride if stride else None

    def _pre(self, module, args) -> None:  # noqa: ANN001
        torch = self.torch
        if torch._C._current_autograd_node() is not None:
            return  # a forward recomputed in backward (checkpointing): not the step's routing
        router = self.routers.get(id(module))
        if router is not None and args and isinstance(args[0], torch.Tensor) and args[0].dim() >= 1:
            router["tokens"] += args[0].numel() // max(1, int(args[0].shape[-1]))
        record = self._layer(module)
        if record is not None:
            if record not in self.layers:
                self.layers.append(record)
            record["forwards"] += 1
            self.active.append({"record": record, "scalars": {}, "topk": False, "made": 0, "assigned": 0})

    def _post(self, module, args, out) -> None:  # noqa: ANN001
        if not self.active or self.active[-1]["record"] is not self.kinds.get(id(module)):
            return
        frame = self.active.pop()
        record = frame["record"]
        terms = [ref() for _, ref in sorted(frame["scalars"].values(), key=lambda v: v[0])]
        for i, scalar in enumerate(t for t in terms if t is not None):
            while len(record["aux"]) <= i:
                record["aux"].append([None, 0.0, 0, 0])  # weight (a tensor until read), value, forwards, reached
            slot = record["aux"][i]
            slot[1] += float(scalar.detach().float())
            slot[2] += 1
            if scalar.requires_grad:
                def reached(grad, slot=slot):  # noqa: ANN001, ANN202
                    g = grad.detach().float().sum()
                    slot[0] = g if slot[0] is None else slot[0] + g
                    slot[3] += 1
                scalar.register_hook(reached)

    def _after(self, name: str, args, kwargs, out) -> None:  # noqa: ANN001, C901
        torch = self.torch
        if name in self._MATMULS and len(args) >= 2:
            a, b = (args[1], args[2]) if name in ("aten.addmm", "aten.baddbmm") and len(args) > 2 else args[:2]
            hit = self._expert(b)
            if hit is not None and isinstance(a, torch.Tensor):
                record, expert = hit
                with torch.no_grad():
                    rows = (a != 0).any(dim=-1)
                    rows = rows.reshape(rows.shape[0], -1).sum(-1) if expert is None and a.dim() >= 3 else rows.sum()
                frame = next((f for f in reversed(self.active) if f["record"] is record), None)
                self.counts.append((record, frame, expert, rows))
        elif name in self._COPIES and args and isinstance(out, torch.Tensor):
            hit = self._expert(args[0])
            if hit is not None:
                self._remember(out, *hit)
        elif name == "aten.stack" and args and isinstance(out, torch.Tensor):
            hits = [self._expert(t) for t in args[0]]
            if hits and all(h is not None for h in hits) and len({id(h[0]) for h in hits}) == 1 \
                    and [h[1] for h in hits] == list(range(hits[0][0]["experts"])):
                self._remember(out, hits[0][0], None)
        if not self.active:
            return
        frame = self.active[-1]
        record, scalars = frame["record"], frame["scalars"]
        if name == "aten.topk" and not frame["topk"] and len(args) > 1 and isinstance(args[0], torch.Tensor) \
                and args[0].dim() >= 1 and int(args[0].shape[-1]) == record["experts"]:
            frame["topk"] = True
            record["topk"] = True
            frame["assigned"] = args[0].numel() // record["experts"] * int(args[1])
            record["assigned"] += frame["assigned"]
        for arg in args:
            if isinstance(arg, torch.Tensor):
                scalars.pop(id(arg), None)  # consumed inside the layer: not one of its outputs
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.dim() == 0 and t.is_floating_point():
                frame["made"] += 1
                scalars[id(t)] = (frame["made"], self.ref(t))

    def _remember(self, out, record, expert) -> None:  # noqa: ANN001
        address = self._address(out)
        if address is not None:
            stride = out.stride(0) if expert is None and out.dim() else 0
            self.weights[address] = (record, expert, stride, out.storage_offset(), self.ref(out))

    def fields(self) -> dict:
        """What goes into the report: ``dropout`` (sorted [p, trailing shape, elements, kind]) and ``moe``."""
        sites = [[p, list(shape), n, kind] for (p, shape, kind), n in sorted(self.sites.items())]
        layers = []
        for record in self.layers:
            processed = record["processed"]
            assigned = record["assigned"] if record["topk"] else None
            aux = [[float(w) if w is not None else 0.0, value / max(1, forwards), forwards, reached]
                   for w, value, forwards, reached in record["aux"]]  # [weight, mean value, forwards, reached]
            layers.append({"layer": record["layer"], "experts": record["experts"], "tokens": record["tokens"],
                           "assigned": assigned, "processed": list(processed), "forwards": record["forwards"],
                           "dropped": None if assigned is None else assigned - sum(processed), "aux": aux,
                           "capacity": sorted(record["capacity"])})
        return {"dropout": sites, "moe": layers}


def _device_memory() -> None:  # noqa: C901 - one closure: nothing of it in module globals
    import atexit
    import json
    import os
    import sys

    state: dict[str, object] = {"fd": None, "steps": 0, "devices": None, "steady": None, "sent": None}
    rank = os.environ.get("RANK")

    channel = _probe_channel()

    def stat(stats: dict, key: str, kind: str) -> int:
        return int(((stats.get(key) or {}).get("all") or {}).get(kind) or 0)

    def devices(cuda) -> list[int]:  # noqa: ANN001
        """The GPUs this process allocated on (a job may use cuda:RANK without set_device)."""
        if not state["devices"]:
            state["devices"] = [d for d in range(cuda.device_count())
                                if stat(cuda.memory_stats_as_nested_dict(d), "reserved_bytes", "peak") > 0]
        return state["devices"]  # type: ignore[return-value]

    def figures(cuda, *, steady: bool) -> dict[str, int] | None:  # noqa: ANN001
        used = devices(cuda)
        if not used:
            return None
        # one read of the allocator's counters per device and step (memory_allocated() and the like each build
        # and sort a flat copy of every counter: a measurable cost on a step of milliseconds)
        stats = {d: cuda.memory_stats_as_nested_dict(d) for d in used}
        if steady and len(used) == 1:
            held = stat(stats[used[0]], "allocated_bytes", "current")
            if held and (state["steady"] is None or held < state["steady"]):  # type: ignore[operator]
                state["steady"] = held
        peak, d = max((stat(stats[d], "reserved_bytes", "peak"), d) for d in used)  # it OOMs on its fullest GPU
        out = {"peak_bytes": peak, "device_index": d, "reserved_bytes": stat(stats[d], "reserved_bytes", "current")}
        if state["steady"] is not None:
            out["steady_bytes"] = state["steady"]  # type: ignore[assignment]
        return out

    def send(fields: dict[str, int]) -> None:
        fd = channel()
        if fd is None:
            return
        record = {"event": "memory", "device": "cuda", **fields}
        if rank is not None and rank.isdigit():
            record["rank"] = int(rank)
        try:
            os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        except OSError:
            pass  # the bot stopped listening (it ends the job after its measured steps)

    def report(*, steady: bool) -> None:
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        try:
            if cuda is None or not cuda.is_available() or not cuda.is_initialized():
                return
            now = figures(cuda, steady=steady)
        except Exception:  # noqa: BLE001 - a broken device (a lost GPU): no figures; memory is never worth a job
            return
        if now is None:
            return
        sent = state["sent"] or {}
        # a line when the peak grew or the held memory fell by more than 1 MiB: a few lines per trial, not one a step
        if (now["peak_bytes"] > sent.get("peak_bytes", 0) + 2**20  # type: ignore[union-attr]
                or now.get("steady_bytes", 0) + 2**20 < sent.get("steady_bytes", 1 << 62)  # type: ignore[union-attr]
                or not sent):
            state["sent"] = now
            d, reserved = now.pop("device_index"), now.pop("reserved_bytes")
            try:
                free, total = cuda.mem_get_info(d)
                capacity = int(free) + reserved
                fraction = getattr(cuda, "get_per_process_memory_fraction", lambda _d: 1.0)(d)
                if 0 < fraction < 1:  # the job capped its allocator (set_per_process_memory_fraction)
                    capacity = min(capacity, int(fraction * total))
                now["capacity_bytes"] = capacity
            except Exception:  # noqa: BLE001 - no capacity figure; the bot falls back to the device's size
                pass
            send(now)

    def post(opt, args, kwargs) -> None:  # noqa: ANN001
        state["steps"] += 1  # type: ignore[operator]
        report(steady=state["steps"] >= 2)  # type: ignore[operator]

    def install(module) -> None:  # noqa: ANN001
        try:
            module.register_optimizer_step_post_hook(post)
        except Exception:  # noqa: BLE001 - a torch without global optimizer hooks: no figures
            pass

    _after_import("torch.optim.optimizer", install)
    atexit.register(lambda: report(steady=False))


def _after_import(name: str, then) -> None:  # noqa: ANN001
    """Call ``then(module)`` the moment module ``name`` has executed (at once if it already has), importing
    nothing itself: what a trial never imports costs it nothing."""
    import importlib.abc
    import sys

    if name in sys.modules:  # a sitecustomize chained before this one imported it
        then(sys.modules[name])
        return

    class AfterImport(importlib.abc.MetaPathFinder):
        done = False

        def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201
            if fullname != name or self.done:
                return None
            self.done = True  # once (not removed from sys.meta_path: the import system is iterating over it)
            for finder in [f for f in sys.meta_path if f is not self]:
                spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run = loader.exec_module

            def exec_module(module) -> None:  # noqa: ANN001
                run(module)
                if module.__name__ == fullname:  # a loader shared by many modules (a zip's) acts once
                    then(module)

            loader.exec_module = exec_module  # this module's own loader instance
            return spec

    sys.meta_path.insert(0, AfterImport())


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows (a venv's or a distribution's), if any."""
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        path = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_infrarsi_shadowed_sitecustomize", path)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _main() -> None:
    import os

    config = os.environ.pop("INFRARSI_WITNESS", None)
    _chain()
    if os.environ.get("INFRARSI_DEVICE_MEMORY"):  # left set: every process of the job reports
        _device_memory()
    clock = os.environ.get("INFRARSI_STEP_CLOCK")  # left set: every rank steps (the bot reads rank 0's)
    steps = _step_source() if config or clock else None  # before the witness: it wraps backward() around ours
    if config:
        _witness(config, steps)
    if clock:
        _step_clock(steps, clock)  # type: ignore[arg-type]  # after the witness: its step-end report comes first


_main()
