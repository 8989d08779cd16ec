"""The host's load around a job (probes/host_load.py): /proc parsing, the load during a job
recovered from the 1-minute averages, the oversubscription rules, and one real sample of this
Linux host.

    pytest tests/unit/test_noise_host_load.py
"""

from __future__ import annotations

import math

import pytest

from distbench.probes import host_load
from distbench.probes.host_load import CpuTimes, HostSample

pytestmark = pytest.mark.unit

STAT = """cpu  1595314 83709 204240 687127 9103 0 4757 6739 0 0
cpu0 797657 41854 102120 343563 4551 0 2378 3369 0 0
intr 123
"""


def sample(load_1m=0.0, others=0.0, cores=2, time_s=0.0, cpu=None) -> HostSample:
    return HostSample(time_s, load_1m, others, cpu, cores)


def test_proc_files_are_parsed():
    assert host_load.parse_loadavg("3.09 2.06 1.75 5/129 18024\n") == (3.09, 5)
    cpu = host_load.parse_cpu_times(STAT)
    assert cpu == CpuTimes(busy=1595314 + 83709 + 204240 + 4757, idle=687127 + 9103, steal=6739)
    with pytest.raises(ValueError, match="no `cpu` line"):
        host_load.parse_cpu_times("intr 1\n")


def test_steal_and_busy_shares_over_a_span():
    start, end = CpuTimes(100, 100, 0), CpuTimes(250, 130, 20)  # 200 jiffies: 150 busy, 20 stolen
    assert host_load.steal_pct(start, end) == pytest.approx(10.0)
    assert host_load.busy_pct(start, end) == pytest.approx(75.0)
    assert host_load.steal_pct(start, start) is None


def test_the_load_during_a_job_is_recovered_from_the_lagging_averages():
    # a host at load 4 (a previous 4-rank job) whose 2-rank job ran 60 s: the average at the end
    # is 4·e^-1 + 2·(1 − e^-1); the job's own load comes back as 2
    end = 4 * math.exp(-1) + 2 * (1 - math.exp(-1))
    assert host_load.job_load(4.0, end, 60.0) == pytest.approx(2.0)
    assert host_load.job_load(4.0, end, 10.0) is None  # too short to tell


def test_more_ranks_than_cores_or_other_work_is_oversubscribed():
    assert host_load.start_reasons(8, 2, sample()) == ["8 ranks on 2 cores"]
    assert host_load.start_reasons(8, 2, None) == ["8 ranks on 2 cores"]
    assert host_load.start_reasons(2, 2, sample(others=0.0)) == []
    busy = host_load.start_reasons(2, 2, sample(others=2.0))
    assert busy == ["2 other runnable task(s) beside 2 rank(s) on 2 cores"]
    assert host_load.start_reasons(1, 2, sample(others=1.0)) == []  # a core each still


def test_a_loaded_or_stolen_job_is_oversubscribed_at_its_end():
    start = sample(load_1m=2.0, time_s=0.0, cpu=CpuTimes(0, 0, 0))
    loaded = sample(load_1m=6.5, time_s=120.0, cpu=CpuTimes(190, 0, 10))
    (load,) = host_load.end_reasons(start, loaded)
    assert load.startswith("load 7.") and load.endswith("during the job on 2 cores")
    stolen = sample(load_1m=2.0, time_s=120.0, cpu=CpuTimes(70, 0, 30))
    assert host_load.end_reasons(start, stolen) == ["30 % of the CPU time stolen by the hypervisor"]
    quiet = sample(load_1m=2.1, time_s=120.0, cpu=CpuTimes(200, 0, 0))
    assert host_load.end_reasons(start, quiet) == []
    assert host_load.end_reasons(None, quiet) == []


def test_host_metrics_of_a_job():
    start = sample(load_1m=1.0, others=1.0, time_s=0.0, cpu=CpuTimes(0, 0, 0))
    end = sample(load_1m=2.0, time_s=60.0, cpu=CpuTimes(90, 10, 0))
    m = host_load.host_metrics(start, end)
    assert m["host_cores"] == 2 and m["host_load_1m_start"] == 1.0 and m["host_load_1m_end"] == 2.0
    assert m["host_runnable_others_start"] == 1.0
    assert m["host_busy_pct"] == pytest.approx(90.0) and m["host_steal_pct"] == 0.0
    assert m["host_load_during_job"] == pytest.approx((2 - math.exp(-1)) / (1 - math.exp(-1)))
    assert host_load.host_metrics(None, None) == {}


def test_this_host_can_be_sampled():
    now = host_load.sample(reads=2, gap_s=0.0)
    assert now is not None and now.cores >= 1 and now.load_1m >= 0 and now.runnable_others >= 0
    assert now.cpu is not None and now.cpu.total > 0
