"""Real hosts: the same studies on machines a user manages, through Ansible and SSH.

inventory  hosts read from an Ansible inventory by `ansible-inventory` (a program, not its API)
ssh        SshHost: one asyncssh connection per host, and the run's record kept on that host
node       RemoteNode: the testbed's node interface on a host or on a namespace there
hoststate  the on-host record and teardown script; the guard that keeps the SSH path intact
prepare    `hosts prepare`: the shipped Ansible playbook (prepare.yml) and the kernel probe
doctor     `hosts doctor`: per host kernel, CPU, NIC toward the other hosts, tool versions
ports      the ports a host's own network namespace holds, read before a run
(the `vpnlab hosts` commands are cli/hosts.py)
"""

from ..tools import Tool

# Programs vpnlab runs on the controller to drive real hosts. What runs on the hosts is the
# drivers' and workloads' own, installed there by `hosts prepare`. The Ansible programs come
# with vpnlab's Python dependencies (ansible-core); Debian's package of that name has them too.
TOOLS = (
    Tool("ansible-inventory", "ansible-core", ("ansible-inventory", "--version"), python=True),
    Tool("ansible-playbook", "ansible-core", ("ansible-playbook", "--version"), python=True),
    Tool("ssh", "openssh-client", ("ssh", "-V")), Tool("sftp", "openssh-client"),  # Ansible's connection
    Tool("base64", "coreutils"),  # on the hosts: the files vpnlab copies there (SshHost.put_files)
)
