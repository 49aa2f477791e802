// Command clusterdns is the local cluster's DNS: CoreDNS's server with only the plugins a cluster DNS
// needs, kubernetes (the records of the DNS-Based Service Discovery specification, read from the API
// server) and errors (failures to its log), instead of CoreDNS's stock main, which links every plugin
// and their cloud SDKs. It answers for one zone (cluster.local) and nothing else: no forwarding, no
// cache (answers follow the API server within the informers' latency, and tests that watch a name
// disappear wait for nothing but that).
//
// The local cluster (e2e/localcluster) runs it as one of its components, on a port it picks, behind the
// kube-dns Service that the real node's kubelet hands to its pods as their nameserver.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster whose Services and Pods are served (required)")
	port := flag.Int("port", 0, "UDP and TCP port to serve on, on every address of the host (required)")
	zone := flag.String("zone", "cluster.local", "the cluster domain")
	flag.Parse()
	if *kubeconfig == "" || *port <= 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*kubeconfig, *port, *zone); err != nil {
		log.Fatalf("clusterdns: %v", err)
	}
}

func run(kubeconfig string, port int, zone string) error {
	// The execution order of the plugins this binary links: errors sees every failure below it.
	if err := dnsserver.SetDirectives([]string{"errors", "kubernetes"}); err != nil {
		return err
	}
	if err := dnsserver.Register(); err != nil {
		return err
	}
	instance, err := caddy.Start(caddy.CaddyfileInput{
		Filepath:       "Corefile",
		Contents:       []byte(corefile(kubeconfig, port, zone)),
		ServerTypeName: "dns",
	})
	if err != nil {
		return err
	}
	log.Printf("clusterdns: serving %s on port %d (udp, tcp)", zone, port)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	sig := <-signals
	log.Printf("clusterdns: %v, stopping", sig)
	shutdownErr := errors.Join(instance.ShutdownCallbacks()...)
	stopErr := instance.Stop()
	instance.Wait()
	return errors.Join(shutdownErr, stopErr)
}

// corefile is the configuration: the zone on port, answered by the kubernetes plugin from the API
// server kubeconfig names. Pod records (<ip>.<ns>.pod.<zone>) are off, as by default; the stable names
// of StatefulSet-like pods (<hostname>.<subdomain>.<ns>.svc.<zone>) come from the headless Service's
// EndpointSlices, which carry the pods' hostnames.
func corefile(kubeconfig string, port int, zone string) string {
	return fmt.Sprintf(`%s:%d {
    errors
    kubernetes %s {
        kubeconfig %q
    }
}
`, zone, port, zone, kubeconfig)
}
