"""What the tests run beyond vpnlab's own declarations: bootstrap.sh installs these for
`./bootstrap.sh test` (`python -m vpnlab.catalog packages --with tests/needs.py`), and conftest
fails any test that runs a program declared neither here nor by vpnlab."""

from vpnlab.tools import Tool

TOOLS = (
    Tool("nft", "nftables"),              # the default namespace's firewall, before and after a run
    Tool("chromium", "chromium"),         # the HTML report, opened in a real browser
    Tool("ps", "procps"), Tool("pgrep", "procps"), Tool("pkill", "procps"), Tool("kill", "procps"),
    Tool("yes", "coreutils"), Tool("sleep", "coreutils"), Tool("true", "coreutils"), Tool("touch", "coreutils"), Tool("uname", "coreutils"),
    Tool("stat", "coreutils"),            # a file's birth time (statx), which Python 3.11 does not read
    Tool("unshare", "util-linux"), Tool("ssh", "openssh-client"), Tool("ssh-keyscan", "openssh-client"),  # the real-hosts harness; the way out an untrusted host key names
    Tool("mount", "mount"), Tool("umount", "mount"),                 # a small tmpfs that fills up (results dir)
    Tool("nstat", "iproute2"),            # the ICMP counters of a path whose router filters them (test_path_mtu.py)
)
