"""Seed studies on real hosts: a short version of each seed whose scenarios this machine's kernel can
carry runs from its own file with `vpnlab run --inventory` on the hosts lab (tests/hosts_harness.py:
namespaces with their own sshd, real Ansible inventory), every scenario on the hosts, none refused.
jaha-2014's scenarios need PPP, L2TP, kernel ESP and netem: test_hosts_kernel.py runs its cut on
hosts inside a VM guest, and PPTP, libreswan and delays on hosts there."""

import pytest

from hosts_harness import built_lab, check_seed_store, host_is_clean, seed_cut, wait_until

LAB_SUBNET = "198.19.255"  # the hosts' own network, outside the testbed's addresses (as test_hosts_study)

# Picks from each seed's own lists (hosts_harness.seed_cut), and the metric every scenario records
# twice. taneja: no VPN, strongSwan, OpenVPN with lz4-v2 and OpenVPN inside OpenVPN (its libreswan
# needs kernel ESP), 4 MB of text by FTP over its 100 Mbit/s link. fave: no VPN, strongSwan, OpenVPN
# and ocserv (its PPTP needs PPP), 2 s of TCP over its 1 Gbit/s link. small-business: no VPN and
# OpenVPN with Blowfish and lzo (its PPTP needs PPP), an HTTP download of 1 MB of random data over
# its 8 Mbit/s line with its queue and office background (tbf and the background on the hosts); the
# line's 0.5 ms delay each way is dropped here, as it needs netem, which this kernel lacks (PPTP and
# delays on hosts: test_hosts_kernel.py's guest, where a scenario with the background cost minutes).
# narayan: no VPN, strongSwan with 3DES-SHA1 and OpenVPN with Blowfish-SHA1 (its PPTP needs PPP) at
# its 8 KB window over its 100 Mbit/s link, whose 0.47 ms delay is dropped here likewise.
SEED_CUTS = {
    "taneja-2019": {"vpns": [0, 2, (3, {"compression": "lz4-v2"}), 4],
                    "links": [0], "workloads": [(0, {"data": "text", "size": "4M"})], "metrics": ("throughput_mbps",)},
    "fave-2018": {"vpns": [0, 1, 3, 5], "links": [0],
                  "workloads": [(0, {"duration_s": 2, "omit_s": 0})], "metrics": ("throughput_mbps",)},
    "small-business-2011": {"vpns": [0, (2, {"cipher": "BF-CBC", "compression": "lzo"})],
                            "links": [(0, {"delay_ms": 0})],
                            "workloads": [(0, {"protocol": "http", "data": "random"})],
                            "metrics": ("throughput_mbps", "background_kbps")},
    "narayan-2008": {"vpns": [0, (1, {"esp": "3des-sha1"}), (3, {"cipher": "BF-CBC", "auth": "SHA1"})],
                     "links": [(0, {"delay_ms": 0})],
                     "workloads": [(0, {"window": "8K", "duration_s": 4, "omit_s": 1})], "metrics": ("throughput_mbps",)},
}


@pytest.fixture(scope="module")
def lab():
    with built_lab(study_home=True, subnet=LAB_SUBNET) as built:
        yield built


@pytest.mark.integration
@pytest.mark.parametrize("seed", list(SEED_CUTS))
def test_a_shortened_seed_study_runs_with_every_scenario_on_the_hosts(lab, seed):
    out = lab.dir / seed
    sets = [arg for assignment in seed_cut(seed, SEED_CUTS[seed]) for arg in ("--set", assignment)]
    result = lab.vpnlab("run", seed, *sets, "--inventory", lab.inventory, "--out", out, "--no-progress", "--no-report",
                        timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    check_seed_store(out / "results.sqlite", seed, SEED_CUTS[seed])
    # the samples only, and the way to the report, which `vpnlab report` then writes from them
    assert not (out / "report.html").exists() and f"vpnlab report {out}" in " ".join(result.stdout.split())
    written = lab.vpnlab("report", out)
    assert written.returncode == 0 and (out / "report.html").exists(), written.stdout + written.stderr
    for host in lab.hosts.values():
        assert wait_until(lambda: host_is_clean(host), timeout=10), host.processes()
