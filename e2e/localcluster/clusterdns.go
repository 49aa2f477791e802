package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	applydiscoveryv1 "k8s.io/client-go/applyconfigurations/discovery/v1"

	"github.com/statefulops/statefulops/e2e/realnode"
)

// The local cluster's DNS: clusterdns (e2e/tools/clusterdns, CoreDNS with its kubernetes plugin, built
// into KubeBin by `make tools`) is a component kwokctl runs beside the control plane, answering for
// ClusterDomain from the API server on a port of this host picked per state dir. Pods reach it as
// pods of any cluster do, at the kube-dns Service's ClusterIP, port 53: the Service has no selector,
// and its one endpoint is the real node's gateway address (the host, as seen from the pod bridge) with
// that port, so the real node's kube-proxy forwards ClusterDNSIP:53 to the host's DNS. The real node's
// kubelet names ClusterDNSIP and ClusterDomain in every pod's resolv.conf. kwok's pods have no
// network, and the cluster DNS serves names for the real node's pods (and the tests on this host).
const (
	// ClusterDNSIP is the kube-dns Service's ClusterIP, the pods' nameserver.
	ClusterDNSIP = "10.96.0.10"
	// ClusterDomain is the zone the cluster DNS answers for: <svc>.<ns>.svc.cluster.local and
	// <hostname>.<subdomain>.<ns>.svc.cluster.local.
	ClusterDomain = "cluster.local"
	// clusterDNSComponent is the kwokctl component (and binary) name: its pid file is
	// <cluster dir>/pids/clusterdns.pid and its log <cluster dir>/logs/clusterdns.log.
	clusterDNSComponent = "clusterdns"
	// clusterDNSService is the Service in kube-system that fronts the cluster DNS.
	clusterDNSService = "kube-dns"
)

// clusterDNSArgs are clusterdns's arguments: kwokctl's in-host admin kubeconfig (written before the
// components start; CoreDNS's informers retry until the API server answers) and the port.
func (k *kwokctl) clusterDNSArgs() []string {
	return []string{
		"-kubeconfig=" + filepath.Join(k.clusterDir(), "kubeconfig.yaml"),
		"-port=" + strconv.Itoa(k.dnsPort),
		"-zone=" + ClusterDomain,
	}
}

// dnsPortPath keeps the cluster DNS's port, so that a running cluster's configuration stays the same
// from one Up to the next (and the cluster is reused).
func dnsPortPath(stateDir string) string { return filepath.Join(stateDir, "clusterdns-port") }

// clusterDNSPort returns the port the state dir's cluster DNS serves on: the saved one while a cluster
// exists (it serves there), or for a new cluster while it is still free on this host; else a free port,
// saved. The port is per state dir because several local clusters may run on one host.
func clusterDNSPort(stateDir string, clusterExists bool) (int, error) {
	if raw, err := os.ReadFile(dnsPortPath(stateDir)); err == nil {
		if port, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && port > 0 && (clusterExists || portFree(port)) {
			return port, nil
		}
	}
	for range 10 {
		udp, err := net.ListenPacket("udp", ":0")
		if err != nil {
			return 0, err
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		_ = udp.Close()
		if !portFree(port) {
			continue
		}
		return port, os.WriteFile(dnsPortPath(stateDir), []byte(strconv.Itoa(port)+"\n"), 0o644)
	}
	return 0, errors.New("no free port for the cluster DNS (UDP and TCP) in 10 tries")
}

// portFree reports whether port can be bound on every address, UDP and TCP, as the cluster DNS binds it.
func portFree(port int) bool {
	addr := ":" + strconv.Itoa(port)
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	return tcp.Close() == nil
}

// ensureClusterDNS points the kube-dns Service at the cluster DNS's port on the host (server-side
// apply, so a reused cluster is left as it is) and waits until the DNS answers for the kubernetes
// Service with its ClusterIP: then it has read the API server, and a pod asking it gets answers.
func (c *Cluster) ensureClusterDNS(ctx context.Context) error {
	start := time.Now()
	apply := metav1.ApplyOptions{FieldManager: "localcluster", Force: true}
	port := int32(c.dnsPort)
	svc := applycorev1.Service(clusterDNSService, metav1.NamespaceSystem).
		WithLabels(map[string]string{"k8s-app": clusterDNSService}).
		WithSpec(applycorev1.ServiceSpec().
			WithClusterIP(ClusterDNSIP).
			WithPorts(
				applycorev1.ServicePort().WithName("dns").WithProtocol(corev1.ProtocolUDP).WithPort(53).WithTargetPort(intstr.FromInt32(port)),
				applycorev1.ServicePort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).WithPort(53).WithTargetPort(intstr.FromInt32(port)),
			))
	if _, err := c.client.CoreV1().Services(metav1.NamespaceSystem).Apply(ctx, svc, apply); err != nil {
		return fmt.Errorf("apply Service %s/%s: %w", metav1.NamespaceSystem, clusterDNSService, err)
	}
	// No selector, so no controller owns the Service's endpoints: this slice, with the label that
	// ties it to the Service and a manager of its own, is the one kube-proxy reads.
	slice := applydiscoveryv1.EndpointSlice(clusterDNSService+"-host", metav1.NamespaceSystem).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: clusterDNSService,
			discoveryv1.LabelManagedBy:   "localcluster.statefulops.dev",
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithEndpoints(applydiscoveryv1.Endpoint().
			WithAddresses(realnode.GatewayIP).
			WithConditions(applydiscoveryv1.EndpointConditions().WithReady(true))).
		WithPorts(
			applydiscoveryv1.EndpointPort().WithName("dns").WithProtocol(corev1.ProtocolUDP).WithPort(port),
			applydiscoveryv1.EndpointPort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).WithPort(port),
		)
	if _, err := c.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Apply(ctx, slice, apply); err != nil {
		return fmt.Errorf("apply EndpointSlice of Service %s/%s: %w", metav1.NamespaceSystem, clusterDNSService, err)
	}

	name := "kubernetes.default.svc." + ClusterDomain + "."
	var got []string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, lastErr = clusterDNSResolver(c.dnsPort).LookupHost(ctx, name)
		return lastErr == nil && slices.Contains(got, kubernetesServiceIP), nil
	})
	if err != nil {
		log := filepath.Join(newKwokctl(c.opts).clusterDir(), "logs", clusterDNSComponent+".log")
		return fmt.Errorf("cluster DNS on port %d: %s: got %v, want %s (last error: %v; log %s): %w", c.dnsPort, name, got, kubernetesServiceIP, lastErr, log, err)
	}
	c.logf("cluster DNS answers on port %d (Service %s/%s %s:53) after %s", c.dnsPort, metav1.NamespaceSystem, clusterDNSService, ClusterDNSIP, time.Since(start).Round(time.Millisecond))
	return nil
}

// clusterDNSResolver is a resolver that asks the cluster DNS on this host's port, for names in
// ClusterDomain (give them fully qualified: the host's search domains do not apply).
func clusterDNSResolver(port int) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}}
}
