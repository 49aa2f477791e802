package realnode

import (
	"fmt"
	"io"
	"net"
)

// ensureLocalOnlyRoutes routes the cluster's virtual address ranges (Service ClusterIPs, kwok's pretend
// pod and node IPs) to the pod bridge, creating it ahead of the CNI plugin (which adopts an existing
// bridge). Those addresses exist only inside this machine: kube-proxy rewrites a ClusterIP to a pod IP
// on the bridge, and nothing answers for a kwok address. Without these routes a packet sent to one of
// them before kube-proxy has programmed it, or to a kwok address at all, would follow the default route
// off the machine; on the bridge it finds no neighbour and is dropped here. The routes go with the
// bridge when it is deleted.
func ensureLocalOnlyRoutes(log io.Writer, cidrs []string) error {
	if len(cidrs) == 0 {
		return nil
	}
	if _, err := net.InterfaceByName(BridgeName); err != nil {
		if _, err := run("ip", "link", "add", BridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	if _, err := run("ip", "link", "set", BridgeName, "up"); err != nil {
		return err
	}
	for _, cidr := range cidrs {
		if _, err := run("ip", "route", "replace", cidr, "dev", BridgeName); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "realnode: routed %v to %s, so nothing sent there leaves the machine\n", cidrs, BridgeName)
	return nil
}
