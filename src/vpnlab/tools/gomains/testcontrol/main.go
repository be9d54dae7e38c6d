// Command testcontrol serves tailscale.com's integration-test control server (tstest/integration/testcontrol)
// over plain HTTP at an address inside vpnlab's testbed, with a DERP map naming the testbed's derper, so
// that tailscaled never needs Tailscale's coordination servers. Each node must present -authkey. The
// routes a node advertises (tailscale up --advertise-routes) are approved at its next map request, as a
// control server's auto-approver does.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/netip"
	"slices"
	"sync"

	"tailscale.com/tailcfg"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/key"
)

func main() {
	listen := flag.String("listen", "", "ip:port to serve the control protocol on")
	authKey := flag.String("authkey", "", "the auth key every node must present")
	derpIP := flag.String("derp-ip", "", "the derper's IPv4 address")
	derpPort := flag.Int("derp-port", 0, "the derper's HTTPS port")
	stunPort := flag.Int("stun-port", 0, "the derper's STUN port")
	flag.Parse()
	if *listen == "" || *authKey == "" || *derpIP == "" || *derpPort == 0 || *stunPort == 0 {
		log.Fatal("testcontrol: -listen, -authkey, -derp-ip, -derp-port and -stun-port are required")
	}
	server := &testcontrol.Server{
		DERPMap:          derpMap(*derpIP, *derpPort, *stunPort),
		RequireAuthKey:   *authKey,
		AllNodesSameUser: true,
		AllOnline:        true,
		ExplicitBaseURL:  "http://" + *listen,
	}
	server.SetOnMapRequest(approveRoutes(server))
	log.Printf("testcontrol: serving on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, server))
}

// derpMap is one region of one node, the testbed's derper, with its self-signed certificate accepted
// (InsecureForTests), as tailscale.com's integration tests run theirs.
func derpMap(ip string, derpPort, stunPort int) *tailcfg.DERPMap {
	return &tailcfg.DERPMap{
		OmitDefaultRegions: true,
		Regions: map[int]*tailcfg.DERPRegion{
			900: {
				RegionID:   900,
				RegionCode: "vpnlab",
				RegionName: "vpnlab testbed",
				Nodes: []*tailcfg.DERPNode{{
					Name:             "900a",
					RegionID:         900,
					HostName:         ip,
					IPv4:             ip,
					IPv6:             "none",
					DERPPort:         derpPort,
					STUNPort:         stunPort,
					InsecureForTests: true,
				}},
			},
		},
	}
}

// approveRoutes returns the map-request hook that approves what a node advertises. The hook runs under
// the server's lock, so the approval runs beside it; a route set once is not set again.
func approveRoutes(server *testcontrol.Server) func(key.NodePublic) {
	var mu sync.Mutex
	approved := map[key.NodePublic][]netip.Prefix{}
	return func(nodeKey key.NodePublic) {
		go func() {
			node := server.Node(nodeKey)
			if node == nil || !node.Hostinfo.Valid() {
				return
			}
			routes := node.Hostinfo.RoutableIPs().AsSlice()
			mu.Lock()
			defer mu.Unlock()
			if slices.Equal(approved[nodeKey], routes) {
				return
			}
			approved[nodeKey] = routes
			server.SetSubnetRoutes(nodeKey, routes)
		}()
	}
}
