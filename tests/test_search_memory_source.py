"""On a GPU the memory model fits the device's memory against its capacity, not the host's resident set.

The bot's own samples are the host's: a GPU job holds a few GiB there whatever its micro-batch, and dies of
its allocator's out-of-memory error long before the host's limit. Trials on a GPU report the allocator's
peak, what it held across steps and what it could have grown to (the device memory reporter); the search
reads those when a run has them (``infrarsi/search/memory_source.py``).
"""

from __future__ import annotations

import math

import pytest

from infrarsi.contract.model import Knob
from infrarsi.measure import device_oom
from infrarsi.search.engine import SearchEngine
from infrarsi.search.features import Priors, build_features
from infrarsi.search.memory_parts import ACTIVATIONS
from infrarsi.search.memory_source import MemorySource, memory_source
from infrarsi.search.models import baseline_states_share, fit_models
from infrarsi.search.space import SearchSpace
from infrarsi.seams.executor import Execution
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

GiB = float(1 << 30)
HOST_LIMIT = 200 * GiB  # the host has plenty: never the memory that runs out here
CAPACITY = 79 * GiB  # an 80 GiB GPU less its CUDA context
SPACE = SearchSpace.from_contract([Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4, 8, 16))], [], [])
PRIORS = Priors(memory={"micro_batch": (math.log(1.6), 0.3)}, memory_parts={"micro_batch": ACTIVATIONS})
CANDIDATES = [Candidate.of({"micro_batch": b}) for b in (1, 2, 4, 8, 16)]


def device_peak(mb: int) -> float:
    """30 GiB of weights, gradients and optimizer state plus 8 GiB of activations per sample: 38, 46, 62, 94, 158."""
    return (30 + 8 * mb) * GiB


def _trial(mb: int, trial_no: int, *, on_gpu: bool = True) -> TrialRecord:
    """What a trial of ``micro_batch=mb`` records: the host's ~6 GiB always; on a GPU its device figures too."""
    oom = device_peak(mb) > CAPACITY
    gpu = dict(device_peak_mem_bytes=int(CAPACITY if oom else device_peak(mb)), device_steady_mem_bytes=int(30 * GiB),
               device_capacity_bytes=int(CAPACITY), device_peak_censored=oom) if on_gpu else {}
    metrics = TrialMetrics(step_time_s=None if oom else 1.0 / mb, peak_mem_bytes=int((6 + 0.01 * mb) * GiB), **gpu)
    return TrialRecord(run_id="r", trial_no=trial_no, candidate=Candidate.of({"micro_batch": mb}),
                       outcome=Outcome.OOM if oom else Outcome.OK, metrics=metrics, cost_s=10.0)


def _fit(records: list[TrialRecord], device_limit: float | None = None):
    return fit_models(SPACE, build_features(SPACE, PRIORS), PRIORS, records, HOST_LIMIT, device_limit)


def test_a_gpu_runs_memory_model_fits_device_peaks_against_the_capacity_its_trials_reported() -> None:
    records = [_trial(1, 0), _trial(2, 1), _trial(8, 2)]  # 38 and 46 GiB ran; 94 GiB ran out of GPU memory
    models = _fit(records)
    assert models.memory_limit == CAPACITY
    p = models.prob_fits(CANDIDATES)
    assert p[0] > 0.95 and p[1] > 0.95
    assert p[2] > 0.9  # 62 GiB
    # micro-batch 8 (94 GiB, predicted 100) ran out; 16 (158 GiB, predicted 179): the growth per doubling is
    # still a prior three doublings out, so not certain, but far from the host model's "everything fits"
    assert p[3] < 0.35 and p[4] < 0.2
    mb4 = math.exp(float(models.memory.predict(models.design([CANDIDATES[2]]))[0][0]))
    assert mb4 == pytest.approx(device_peak(4), rel=0.2)


def test_the_hosts_resident_set_would_have_called_every_micro_batch_safe() -> None:
    # the same trials seen from outside the process only: 6 GiB each, under a 200 GiB host limit
    host_only = [_trial(1, 0, on_gpu=False), _trial(2, 1, on_gpu=False)]
    models = _fit(host_only)
    assert models.memory_limit == HOST_LIMIT
    assert min(models.prob_fits(CANDIDATES)) > 0.9  # what the search believed on a GPU before device readings


def test_a_trial_the_bot_killed_at_the_host_limit_tells_the_device_model_nothing() -> None:
    killed = TrialRecord(run_id="r", trial_no=5, candidate=Candidate.of({"micro_batch": 4}), outcome=Outcome.OOM,
                         metrics=TrialMetrics(peak_mem_bytes=int(HOST_LIMIT), peak_mem_censored=True), cost_s=3.0)
    source = memory_source([_trial(1, 0), killed], host_limit=HOST_LIMIT)
    assert source.kind == "device" and source.reading(killed) is None
    assert source.reading(_trial(8, 2)) == (CAPACITY, True)  # ran out of GPU memory: at least the capacity
    assert source.reading(_trial(2, 1)) == (device_peak(2), False)


def test_the_devices_limit_is_the_reported_capacity_else_the_doctors_gpu_memory_else_the_host_model_stays() -> None:
    assert memory_source([], host_limit=HOST_LIMIT, device_limit=80 * GiB) == MemorySource(kind="host",
                                                                                          limit=HOST_LIMIT)
    unreported = TrialRecord(run_id="r", trial_no=0, candidate=Candidate.of({"micro_batch": 1}), outcome=Outcome.OK,
                             metrics=TrialMetrics(step_time_s=1.0, peak_mem_bytes=int(6 * GiB),
                                                  device_peak_mem_bytes=int(38 * GiB)), cost_s=1.0)
    assert memory_source([unreported], host_limit=HOST_LIMIT, device_limit=80 * GiB).limit == 80 * GiB
    # neither a reported capacity nor the doctor's GPU: the host's model, not device peaks against no limit
    assert memory_source([unreported], host_limit=HOST_LIMIT) == MemorySource(kind="host", limit=HOST_LIMIT)
    engine = SearchEngine(SPACE, PRIORS, memory_limit=HOST_LIMIT, device_memory_limit=80 * GiB)
    assert engine.models.memory_limit == HOST_LIMIT  # nothing has run yet
    engine.observe([unreported])
    assert engine.models.memory_limit == 80 * GiB
    engine.observe([_trial(2, 1)])
    assert engine.models.memory_limit == CAPACITY


def test_the_baselines_states_share_on_a_gpu_is_what_the_device_held_across_steps() -> None:
    source = memory_source([_trial(1, 0)], host_limit=HOST_LIMIT)
    assert baseline_states_share(SPACE, [_trial(1, 0)], source) == pytest.approx(30 / 38)
    assert baseline_states_share(SPACE, [_trial(1, 0)]) is None  # the host's: no steady sample recorded


def _execution(**kw) -> Execution:
    return Execution(**{"events": (), "returncode": 1, "wall_s": 5.0, "peak_rss_bytes": 6 << 30, **kw})


@pytest.mark.parametrize(("execution", "expected"), [
    (_execution(stderr_tail="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (_execution(stderr_tail="RuntimeError: HIP out of memory. Tried to allocate 1.00 GiB"), True),
    (_execution(probe_oom="ran out", device_peak_mem_bytes=70 << 30), True),  # the job's own report, on a GPU
    (_execution(probe_oom="ran out"), False),  # no GPU reading: the host's memory, for all we know
    (_execution(stderr_tail="DefaultCPUAllocator: can't allocate memory", device_peak_mem_bytes=1 << 30), False),
    (_execution(killed_for="memory", stderr_tail="CUDA out of memory"), False),  # the bot's host limit killed it
    (_execution(returncode=0, stderr_tail="CUDA out of memory; retrying with batch 8"), False),  # it ran on
], ids=["cuda", "rocm", "probe-on-gpu", "probe-no-gpu", "host-allocator", "host-limit", "caught-and-retried"])
def test_a_gpu_out_of_memory_is_told_from_the_hosts(execution: Execution, expected: bool) -> None:
    assert device_oom(execution) is expected
