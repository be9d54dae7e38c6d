"""CPU accounting rises with load (real processes, real /proc)."""

import subprocess

import pytest

from vpnlab.cpu import CpuMeter

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
