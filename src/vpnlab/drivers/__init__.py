"""The registry of VPN drivers: one module each, all keeping the contract in base.py."""

from __future__ import annotations

from .base import Driver
from .l2tp import L2tp
from .libreswan import Libreswan
from .nebula import Nebula
from .none import NoVpn
from .ocserv import Ocserv
from .openvpn import OpenVpn
from .pptp import Pptp
from .softether import SoftEther
from .strongswan import StrongSwan
from .tinc import Tinc
from .wireguard import WireGuard
from .yggdrasil import Yggdrasil

REGISTRY: dict[str, Driver] = {d.name: d for d in (NoVpn(), WireGuard(), OpenVpn(), StrongSwan(), Ocserv(), Pptp(), L2tp(),
                                                Libreswan(), Nebula(), Tinc(), Yggdrasil(), SoftEther())}
