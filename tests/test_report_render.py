"""The PR body and report.md: six sections, the marker and its hash, the forge's size limit."""

from __future__ import annotations

from infrarsi.report import SECTIONS, TrialRow, body_changed, parse_marker, render_markdown, render_pr_body
from infrarsi.report.charts import memory_chart
from infrarsi.report.model import Invariant, SourceChange, command_line
from infrarsi.contract.model import Knob
from tests.support.reports import sample_report


def test_body_has_the_six_sections_in_order_and_a_marker() -> None:
    body = render_pr_body(sample_report(), full_report=".infrarsi/runs/r7/report.md")
    positions = [body.index(f"## {s}\n") for s in SECTIONS]
    assert positions == sorted(positions)
    assert body.startswith("<!-- infrarsi:run=r7 hash=")
    assert parse_marker(body)[0] == "r7"
    assert "**Verified speedup 1.50x** (90% CI [1.30, 1.70], p = 0.01): dtype fp32→bf16, +fused_gelu." in body
    assert "| MFU | 10.00% | 15.00% |" in body
    assert "`model.py` · `gelu_tanh` · lines 10–14" in body and "([diff](.infrarsi/runs/r7/winner.diff))" in body
    assert "| `dtype` | `fp32` | `bf16` | --dtype flag of train.py |" in body
    assert "Out of memory: 2 trial(s)" in body and "Total cost of failure: **12.0 device-seconds**" in body
    assert "**LLM cost**: 0 tokens in, 0 out, **$0.0300** for a verified 1.50x speedup" in body
    assert "LLM proposer: 0 request(s) sent; 1200 tokens, $0.0300." in body
    assert "python train.py --dtype bf16" in body


def test_on_a_gpu_the_summary_gives_the_gpus_peak_memory_beside_the_hosts() -> None:
    body = render_pr_body(sample_report(gpu_peak_before_bytes=30 * 2**30, gpu_peak_after_bytes=52 * 2**30,
                                  gpu_capacity_bytes=79 * 2**30))
    assert "| peak memory (host) | 512 MiB | 256 MiB |" in body
    assert "| peak GPU memory (of 80,896 MiB) | 30,720 MiB | 53,248 MiB |" in body
    cpu = render_pr_body(sample_report())
    assert "| peak memory | 512 MiB | 256 MiB |" in cpu and "GPU memory" not in cpu
    gpu_oom = TrialRow(trial_no=9, candidate="micro_batch=16", outcome="oom", reason="CUDA out of memory",
                       step_time_s=None, peak_mem_bytes=6 * 2**30, cost_s=40.0, stage="search",
                       gpu_peak_bytes=78 * 2**30, gpu_oom=True)
    body = render_pr_body(sample_report(oom=(gpu_oom,)))
    assert "#9 `micro_batch=16` (40.0 s, out of GPU memory, the allocator at 79,872 MiB)" in body
    # the memory chart shows the memory that runs out: the GPU's, against what its allocator could grow to
    ok = TrialRow(trial_no=10, candidate="micro_batch=4", outcome="ok", reason="", step_time_s=0.2,
                  peak_mem_bytes=6 * 2**30, cost_s=40.0, stage="search", gpu_peak_bytes=52 * 2**30)
    chart = "\n".join(memory_chart(sample_report(trials=(ok, gpu_oom), gpu_capacity_bytes=79 * 2**30)))
    assert "Peak GPU memory per trial (MiB)" in chart and "what the GPU's allocator could grow to, 80,896 MiB" in chart
    assert '"10", "9 oom ≥"' in chart


def test_the_marker_hash_tells_whether_an_update_changes_anything() -> None:
    a = render_pr_body(sample_report())
    assert not body_changed(a, render_pr_body(sample_report()))
    assert body_changed(a, render_pr_body(sample_report(speedup=1.6)))
    assert body_changed("a human's body", a)


def test_long_tables_are_cut_to_fit_with_a_pointer_to_the_full_report() -> None:
    report = sample_report(failed=2000)
    full = render_markdown(report)
    assert len(full) > 65_536
    body = render_pr_body(report, full_report=".infrarsi/runs/r7/report.md")
    assert len(body) <= 65_536
    for s in SECTIONS:
        assert f"## {s}\n" in body
    assert "more rows | | see the full report: .infrarsi/runs/r7/report.md" in body
    small = render_pr_body(report, limit=4000)
    assert len(small) <= 4000 and small.startswith("<!-- infrarsi:run=r7")


def test_no_verified_winner_claims_no_speedup() -> None:
    body = render_pr_body(sample_report(promoted=False, speedup=None, speedup_ci=None, verification=None,
                                  notes=("no candidate was verified faster than the baseline; nothing is proposed",)))
    assert "**No verified speedup.**" in body and "Verified speedup" not in body


def test_command_line_passes_every_knob_as_a_trial_does() -> None:
    knobs = [Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype"),
             Knob(name="fast", kind="bool", default=False, flag="--fast", switch=True),
             Knob(name="threads", kind="int", default=0, values=(0, 1), env="OMP_NUM_THREADS")]
    assert command_line(["python", "train.py"], ["--steps", "8"], knobs, {"dtype": "bf16", "fast": True}) == \
        "OMP_NUM_THREADS=0 python train.py --steps 8 --dtype bf16 --fast"


def test_one_row_per_invariant_however_many_runs_checked_it() -> None:
    from dataclasses import replace

    base = sample_report()
    checks = tuple(Invariant(name=n, ok=not (n == "clock" and i == 3), detail=f"trial {i}: {n} detail")
                   for i in range(5) for n in ("loss_band", "work", "clock"))
    body = render_pr_body(replace(base, verification=replace(base.verification, invariants=checks)))
    rows = [line for line in body.splitlines() if line.startswith(("| loss_band", "| work", "| clock"))]
    assert rows == ["| loss_band | ✅ 5/5 runs ok | trial 0: loss_band detail |",
                    "| work | ✅ 5/5 runs ok | trial 0: work detail |",
                    "| clock | ❌ 1/5 runs broken | trial 3: clock detail |"]


def test_a_row_that_was_not_checked_never_reads_ok_and_a_waived_one_is_listed_under_the_table() -> None:
    from dataclasses import replace

    base = sample_report()
    checks = (Invariant(name="work", ok=False, status="not_checked", detail="trial 1: no witness here"),
              Invariant(name="lock", ok=False, status="not_checked", waived=True, detail="trial 1: lock not seen"),
              Invariant(name="clock", ok=True, status="ok", detail="trial 1: fine"))
    body = render_pr_body(replace(base, verification=replace(base.verification, invariants=checks)))
    assert "| work | ⚠️ not checked in 1/1 runs | trial 1: no witness here |" in body
    assert "| lock | ⚠️ not checked in 1/1 runs (waived by the contract) | trial 1: lock not seen |" in body
    assert "waived by the contract (`[verify] waive` in infrarsi.toml):" in body
    assert "- `lock`: trial 1: lock not seen" in body


def test_the_llm_cost_stands_next_to_the_speedup_with_a_dated_price_table() -> None:
    llm = {"proposer": "anthropic", "model": "claude-sonnet-4-5", "calls": 3, "cached_calls": 1,
           "input_tokens": 12_000, "output_tokens": 2_500, "cost_usd": 0.0735, "prices_as_of": "2026-12-02",
           "prices_source": "Anthropic list prices, https://www.anthropic.com/pricing",
           "patches_proposed": [{"id": "PROPOSED-PATCH-ID", "spec": {"replacement": "SOURCE-OF-THE-PATCH"}}] * 20}
    body = render_pr_body(sample_report(llm=llm))
    summary = body.split("## Changes")[0]
    assert ("**LLM cost**: 12,000 tokens in, 2,500 out, **$0.0735** for a verified 1.50x speedup "
            "(claude-sonnet-4-5, 3 calls (+1 cached); at Anthropic list prices, https://www.anthropic.com/pricing "
            "as of 2026-12-02).") in summary
    assert "SOURCE-OF-THE-PATCH" not in body  # a proposal's code is not dumped into the body (one table row each)


def test_each_hunk_is_listed_under_its_own_patch_with_its_author_and_long_sources_are_collapsed() -> None:
    from infrarsi.patches import Effect, PatchSpec
    from infrarsi.report.model import _patch_changes, patch_infos

    effect = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")
    catalog = {"zero_grad_set_to_none": PatchSpec(
        id="zero_grad_set_to_none", title="zero_grad(set_to_none=True)", rationale="frees gradients",
        targets=("train.py::train_step",), effect=effect, kind="codemod", codemod="zero_grad_set_to_none")}
    source = "def hidden(self, idx):\n" + "".join(f"    x{i} = idx\n" for i in range(30)) + "    return idx\n"
    llm = {"model": "claude-sonnet-4-5", "calls": 2, "tokens": 9000, "cost_usd": 0.05, "patches_proposed": [
        {"id": "llm_hidden_1", "title": "hidden without copies", "targets": ["model.py::GPT.hidden"],
         "rationale": "fewer copies", "evidence": "forward phase", "status": "accepted", "reason": "",
         "spec": {"replacement": source}},
        {"id": "llm_mlp_2", "title": "MLP", "targets": ["model.py::MLP.forward"], "rationale": "fused",
         "evidence": "", "status": "accepted", "reason": "", "spec": {"replacement": "def forward(self, x):\n"
                                                                      "    return x\n"}},
        {"id": "llm_lr_3", "title": "lr", "targets": ["harness.py::lr_at"], "rationale": "",
         "status": "rejected", "reason": "outside the editable scope: harness.py: locked path modified",
         "spec": {}}]}
    hunks = tuple(SourceChange(path=p, symbol=s, line_start=1, line_end=2, lines_added=1, lines_removed=1)
                  for p, s in (("model.py", "GPT.hidden"), ("model.py", "MLP.forward"), ("train.py", "train_step")))
    changes = _patch_changes(("llm_hidden_1", "llm_mlp_2", "zero_grad_set_to_none"), hunks,
                             patch_infos(llm, catalog))
    by_id = {c.patch_id: c for c in changes}
    assert [s.symbol for s in by_id["llm_hidden_1"].sources] == ["GPT.hidden"]
    assert [s.symbol for s in by_id["llm_mlp_2"].sources] == ["MLP.forward"]
    assert [s.symbol for s in by_id["zero_grad_set_to_none"].sources] == ["train_step"]
    assert by_id["llm_hidden_1"].author == "model claude-sonnet-4-5" and by_id["zero_grad_set_to_none"].author \
        == "catalog"
    report = sample_report(patches=changes, winner_patches=tuple(by_id), llm=llm)
    data = report.to_dict()
    assert {p["patch_id"]: [s["symbol"] for s in p["sources"]] for p in data["patches"]} == {
        "llm_hidden_1": ["GPT.hidden"], "llm_mlp_2": ["MLP.forward"], "zero_grad_set_to_none": ["train_step"]}
    for text in (render_markdown(report), render_pr_body(report)):
        assert "- patch `llm_hidden_1` — model claude-sonnet-4-5: hidden without copies" in text
        assert "<details><summary>source of the replacement (32 lines)</summary>" in text
        assert "LLM proposer (claude-sonnet-4-5): 2 request(s) sent; 9000 tokens, $0.0500." in text
        assert "| `llm_lr_3` | harness.py::lr_at | rejected | outside the editable scope" in text
        assert max(len(line) for line in text.splitlines()) < 400, "no repr line"


def test_what_the_search_blamed_its_failures_on_is_listed_under_them() -> None:
    body = render_pr_body(sample_report(crash_suspects=(("vpp=4", 3, 1.5), ("pp=2 + vpp=4", 2, 0.4))))
    assert ("The search blamed its failed trials on settings that never ran elsewhere, and avoided them: "
            "`vpp=4` (1.5 of 3 failed trials), `pp=2 + vpp=4` (0.4 of 2 failed trials).") in body
    assert "blamed" not in render_pr_body(sample_report())


def test_quarantined_patches_have_a_short_section_of_their_own_with_the_lines_named() -> None:
    from infrarsi.report.model import Quarantined

    assert "Quarantined for a person" not in render_markdown(sample_report())
    report = sample_report(quarantined=(Quarantined(patches=("relay",), when="trial 7", findings=(
        "train.py:41: os.dup2 (low-level fd trick: x)", "train.py:42: os.write (low-level fd trick: x)")),))
    for text in (render_markdown(report), render_pr_body(report)):
        section = text[text.index("## Quarantined for a person\n"):text.index("## Model calibration\n")]
        assert "- `relay` (trial 7)" in section
        assert "  - train.py:41: os.dup2 (low-level fd trick: x)" in section and "train.py:42: os.write" in section
