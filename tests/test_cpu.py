"""CPU accounting rises with load (real processes, real /proc)."""

import subprocess

import pytest

from vpnlab.cpu import SATURATED_PCT, CpuMeter

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace():
    name = "vlcputest"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name])


def test_daemon_cpu_rises_with_load(namespace):
    idle = CpuMeter([namespace], [])
    subprocess.run(["sleep", "0.5"])
    quiet, _ = idle.finish(None)
    meter = CpuMeter([namespace], [])
    # a busy "daemon" in the client-side namespace
    daemon = subprocess.Popen(["ip", "netns", "exec", namespace, "yes"], stdout=subprocess.DEVNULL)
    try:
        subprocess.run(["sleep", "0.5"])
        busy, _ = meter.finish(1e9)
    finally:
        daemon.kill()
        daemon.wait()
    assert quiet["cpu_vpn_client_pct"] < 5
    assert busy["cpu_vpn_client_pct"] > 50
    assert busy["cpu_vpn_gateway_pct"] == 0
    assert busy["cpu_s_per_gb"] > 0.25


def test_baseline_has_no_daemon_figures():
    values, flags = CpuMeter([], []).finish(None)
    assert "cpu_vpn_client_pct" not in values and "cpu_kernel_pct" in values


def test_one_busy_thread_is_named_as_the_bound(namespace):
    """One daemon thread at 100% of one core bounds throughput while the machine may look half idle."""
    meter = CpuMeter([namespace], [])
    daemon = subprocess.Popen(["ip", "netns", "exec", namespace, "yes"], stdout=subprocess.DEVNULL)
    try:
        subprocess.run(["sleep", "1"])
        values, flags = meter.finish(None)
    finally:
        daemon.kill()
        daemon.wait()
    # `yes` is one thread: it is the whole daemon's CPU (on a shared machine it may get less than a core)
    assert values["cpu_busiest_thread_pct"] == pytest.approx(values["cpu_vpn_client_pct"], rel=0.1), values
    named = any(f.startswith("thread yes/yes at") for f in flags)
    assert named == (values["cpu_busiest_thread_pct"] > SATURATED_PCT), (values, flags)
    assert values["cpu_busiest_core_pct"] >= values["cpu_busy_pct"] - 1
