"""CPU accounting rises with load (real processes, real /proc)."""

import os
import signal
import subprocess
import time

import pytest

from vpnlab.catalog import TRAFFIC_TOOLS
from vpnlab.measure.cpu import SATURATED_PCT, TICK, CpuMeter, OtherLoadSeries

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace():
    name = "vlcputest"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name])


def test_daemon_cpu_rises_with_load(namespace):
    idle = CpuMeter.here([namespace], [])
    subprocess.run(["sleep", "0.5"])
    quiet, _ = idle.finish(None)
    meter = CpuMeter.here([namespace], [])
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
    values, flags = CpuMeter.here([], []).finish(None)
    assert "cpu_vpn_client_pct" not in values and "cpu_kernel_pct" in values


def test_one_busy_thread_is_named_as_the_bound(namespace):
    """One daemon thread at 100% of one core bounds throughput while the machine may look half idle."""
    meter = CpuMeter.here([namespace], [])
    daemon = subprocess.Popen(["ip", "netns", "exec", namespace, "yes"], stdout=subprocess.DEVNULL)
    try:
        subprocess.run(["sleep", "1"])
        values, flags = meter.finish(None)
    finally:
        daemon.kill()
        daemon.wait()
    # `yes` is one thread: it is the whole daemon's CPU (on a shared machine it may get less than a core)
    assert values["cpu_busiest_thread_pct"] == pytest.approx(values["cpu_vpn_client_pct"], rel=0.1), values
    named = any(f.kind == "cpu-saturated" and f.text.startswith("thread yes/yes at") for f in flags)
    assert named == (values["cpu_busiest_thread_pct"] > SATURATED_PCT), (values, flags)
    assert values["cpu_busiest_core_pct"] >= values["cpu_busy_pct"] - 1


def test_a_workloads_client_beside_a_tunnel_end_is_not_counted_as_the_vpn(namespace):
    """In remote-access a transfer's curl runs in the client-side tunnel end's namespace: its CPU is
    the workload's, not the VPN daemons' (counted there before, and could be named as their bound).
    The meter is told the workloads' programs as measure.py tells it: the catalog's."""
    meter = CpuMeter.here([namespace], [], traffic=TRAFFIC_TOOLS)
    client = subprocess.Popen(["ip", "netns", "exec", namespace, "curl", "-s", "file:///dev/zero", "-o", "/dev/null"])
    try:
        subprocess.run(["sleep", "1"])
        values, flags = meter.finish(None)
        with open(f"/proc/{client.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    finally:
        client.kill()
        client.wait()
    curl_pct = 100 * (int(fields[11]) + int(fields[12])) / TICK
    assert curl_pct > 5, "curl did not get the CPU to show the difference"
    assert values["cpu_vpn_client_pct"] < 2 and "cpu_busiest_thread_pct" not in values, (values, curl_pct)
    assert not any("curl" in f.text for f in flags)


def test_a_program_outside_the_run_that_loads_the_machine_is_named(namespace):
    """A busy program beside the run (a build, a browser) is in the machine's figures and the throughput:
    the sample says so and names it; the same load inside the run's namespace is the run's, not flagged."""
    outside = CpuMeter.here([namespace], [], everywhere=[namespace])
    # a program of its own, not a child of this (vpnlab's) process: the shell leaves it to init
    hog = int(subprocess.run(["sh", "-c", "yes > /dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                             check=True).stdout)
    try:
        subprocess.run(["sleep", "1"])
        _, flags = outside.finish(None)
    finally:
        os.kill(hog, signal.SIGKILL)
    busy = [f for f in flags if f.kind == "busy-machine" and f.text.startswith("programs outside this run took")]
    assert busy and "yes " in busy[0].text and busy[0].declared.disturbed, flags
    inside = CpuMeter.here([namespace], [], everywhere=[namespace])
    # left to init too: only its namespace makes it the run's
    daemon = int(subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c", "yes > /dev/null 2>&1 & echo $!"],
                                capture_output=True, text=True, check=True).stdout)
    try:
        subprocess.run(["sleep", "1"])
        _, flags = inside.finish(None)
    finally:
        os.kill(daemon, signal.SIGKILL)
    assert not any(f.kind == "busy-machine" and "yes " in f.text for f in flags), flags


def test_the_host_sees_a_busy_program_beside_a_guest_but_not_what_vpnlab_started():
    """A VM guest sees only its own processes: the host samples its own over the guest's repetitions.
    qemu, a child of vpnlab, is the run's; so is anything below it."""
    series = OtherLoadSeries()
    start = time.time()
    mine = subprocess.Popen(["sh", "-c", "yes > /dev/null; true"], start_new_session=True)  # yes two levels down
    try:
        subprocess.run(["sleep", "1"])
        series.sample()
        assert series.flags(start, time.time()) == []
    finally:
        os.killpg(mine.pid, signal.SIGKILL)
        mine.wait()
    start = time.time()
    hog = int(subprocess.run(["sh", "-c", "yes > /dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                             check=True).stdout)
    try:
        subprocess.run(["sleep", "1"])
        series.sample()
    finally:
        os.kill(hog, signal.SIGKILL)
    [flag] = series.flags(start, time.time())
    assert flag.kind == "busy-machine" and flag.text.startswith("programs outside this run took"), flag
    assert "(yes " in flag.text, flag
