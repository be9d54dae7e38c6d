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
