"""The registry of VPN drivers: one module each, all keeping the contract in base.py."""

from __future__ import annotations

from .base import Driver
from .none import NoVpn
from .ocserv import Ocserv
from .openvpn import OpenVpn
from .strongswan import StrongSwan
from .wireguard import WireGuard

REGISTRY: dict[str, Driver] = {d.name: d for d in (NoVpn(), WireGuard(), OpenVpn(), StrongSwan(), Ocserv())}
