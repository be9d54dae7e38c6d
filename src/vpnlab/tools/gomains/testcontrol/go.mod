module vpnlab.invalid/testcontrol

go 1.26.5

require tailscale.com v1.98.10
