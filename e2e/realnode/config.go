package realnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Host commands and CNI plugins the node needs (Debian: containerd, runc, iptables, iproute2,
// containernetworking-plugins).
var (
	hostCommands = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore", "ip"}
	cniPlugins   = []string{"bridge", "host-local", "portmap", "loopback"}
)

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// Local endpoints of the node's daemons (fixed: one real node per host).
const (
	kubeletHealthz   = "127.0.0.1:10248"
	kubeProxyHealthz = "127.0.0.1:10256"
	kubeProxyMetrics = "127.0.0.1:10249"
)

// cluster is what the node needs to know about the cluster it joins.
type cluster struct {
	server string
	caPEM  []byte
	caCert *x509.Certificate
	caKey  any
	admin  *rest.Config
}

func readCluster(opts Options) (cluster, error) {
	var c cluster
	admin, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return c, fmt.Errorf("load %s: %w", opts.Kubeconfig, err)
	}
	c.admin, c.server = admin, admin.Host
	if c.caPEM, err = os.ReadFile(opts.CACert); err != nil {
		return c, err
	}
	keyPEM, err := os.ReadFile(opts.CAKey)
	if err != nil {
		return c, err
	}
	pair, err := tls.X509KeyPair(c.caPEM, keyPEM)
	if err != nil {
		return c, fmt.Errorf("cluster CA %s, %s: %w", opts.CACert, opts.CAKey, err)
	}
	c.caKey = pair.PrivateKey
	if c.caCert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
		return c, err
	}
	return c, nil
}

// clientCert returns a new key and a client certificate for cn in groups orgs, signed by the cluster CA.
func (c cluster) clientCert(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.caCert, key.Public(), c.caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// writeKubeconfig writes a kubeconfig for user with the client certificate of cn, orgs.
func (c cluster) writeKubeconfig(path, user, cn string, orgs ...string) error {
	certPEM, keyPEM, err := c.clientCert(cn, orgs...)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.server, CertificateAuthorityData: c.caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

// writeConfigs writes everything the daemons read: credentials, containerd's config, the CNI network
// and the kubelet's and kube-proxy's configurations.
func writeConfigs(l layout, opts Options, c cluster, nodeIP net.IP) error {
	if err := os.WriteFile(l.pki("ca.crt"), c.caPEM, 0o644); err != nil {
		return err
	}
	// Stop deletes the Node object with the cluster's admin credentials: the Node authorizer does not
	// let a kubelet delete its own Node.
	admin, err := os.ReadFile(opts.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.adminKubeconfig(), admin, 0o600); err != nil {
		return err
	}
	// Node authorization: the kubelet is user system:node:<name> in group system:nodes.
	if err := c.writeKubeconfig(l.kubeletKubeconfig(), "kubelet", "system:node:"+NodeName, "system:nodes"); err != nil {
		return err
	}
	// The default RBAC binds system:node-proxier to the user system:kube-proxy.
	if err := c.writeKubeconfig(l.kubeProxyKubeconfig(), "kube-proxy", "system:kube-proxy"); err != nil {
		return err
	}
	runc, err := lookPath("runc")
	if err != nil {
		return err
	}
	files := map[string]string{
		l.containerdConfig(): containerdConfig(l, runc),
		filepath.Join(l.cniConfDir(), "10-statefulops.conflist"): cniConfig(l),
		l.kubeletConfig():   kubeletConfig(l, nodeIP, opts.ClusterDNS, opts.ClusterDomain),
		l.kubeProxyConfig(): kubeProxyConfig(l, nodeIP),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	// Cleanup runs `kube-proxy --cleanup` with the same binary, even after a crash.
	return os.WriteFile(l.host("kube-proxy"), []byte(filepath.Join(opts.KubeBin, "kube-proxy")), 0o644)
}

// containerdConfig keeps containerd's sockets, root and state, runc's state, the network namespaces
// and the registry hosts (TrustRegistry) under the realnode dir. The CRI settings are those this kind of machine needs: no
// CAP_SYS_RESOURCE (restrict_oom_score_adj, or every sandbox fails as the kubelet asks for a negative
// oom_score_adj), cgroupfs (systemd is not PID 1), overlayfs, and our own pause image as the sandbox.
func containerdConfig(l layout, runc string) string {
	return fmt.Sprintf(`# Written by realnode.
version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[6]q
        Root = %[7]q
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[10]q
`, l.path("containerd", "root"), l.path("containerd", "state"), l.containerdSocket(), l.path("containerd", "opt"),
		SandboxImage, runc, l.runcRoot(), cniBinDir, l.cniConfDir(), l.registryHosts())
}

// cniConfig is the pod network: a bridge with the host as gateway, host-local addresses out of PodCIDR
// (state under the realnode dir) and portmap for hostPorts; containerd adds the loopback itself. No
// masquerading: pods talk to the host and each other only.
func cniConfig(l layout) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "statefulops",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, BridgeName, PodCIDR, l.cniIPAMDir())
}

// kubeletConfig is the KubeletConfiguration: cgroupfs on cgroup v1, no swap check, eviction and image
// GC that leave a small disposable machine alone, a short node lease so a dead node shows within
// seconds, a restart back-off capped at 5s (the tests kill containers on purpose), the taint, x509
// (the cluster CA) and webhook authentication and webhook authorization for the API server's
// logs/exec/port-forward calls. With clusterDNS, pods (dnsPolicy ClusterFirst) get it
// as their only nameserver and <ns>.svc.<domain>, svc.<domain>, <domain> as search domains; without it
// the kubelet gives them the host's resolv.conf.
func kubeletConfig(l layout, nodeIP net.IP, clusterDNS, domain string) string {
	if domain == "" {
		domain = "cluster.local"
	}
	dns := ""
	if clusterDNS != "" {
		dns = fmt.Sprintf("clusterDNS:\n- %q\n", clusterDNS)
	}
	return fmt.Sprintf(`# Written by realnode.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %[1]q
imageServiceEndpoint: %[1]q
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: %[2]q
healthzBindAddress: %[3]q
healthzPort: %[4]s
readOnlyPort: 0
podLogsDir: %[5]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[6]q
authorization:
  mode: Webhook
registerNode: true
registerWithTaints:
- key: %[7]q
  value: %[8]q
  effect: NoSchedule
nodeLeaseDurationSeconds: 20
nodeStatusUpdateFrequency: 5s
evictionHard:
  memory.available: "1%%"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
  imagefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
# The tests SIGKILL operators and webhook servers on purpose: a killed container restarts within 5s,
# not after a back-off that doubles from 10s up to 5 minutes over the kills of one suite.
crashLoopBackOff:
  maxContainerRestartPeriod: 5s
%[9]sclusterDomain: %[10]q
resolvConf: /etc/resolv.conf
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
protectKernelDefaults: false
`, "unix://"+l.containerdSocket(), nodeIP.String(), hostOf(kubeletHealthz), portOf(kubeletHealthz), l.podLogs(),
		l.pki("ca.crt"), TaintKey, LabelValue, dns, domain)
}

func kubeletArgs(l layout, nodeIP net.IP) []string {
	return []string{
		"--config=" + l.kubeletConfig(),
		"--kubeconfig=" + l.kubeletKubeconfig(),
		"--root-dir=" + l.kubeletRoot(),
		"--cert-dir=" + l.pki("kubelet"),
		"--hostname-override=" + NodeName,
		"--node-ip=" + nodeIP.String(),
		"--node-labels=" + LabelKey + "=" + LabelValue,
		"--v=1",
	}
}

// kubeProxyConfig is the KubeProxyConfiguration: iptables mode, its own credentials, local health and
// metrics endpoints, and no changes to the host's conntrack sysctls or route_localnet (zero values and
// localhostNodePorts: false leave them as they are).
func kubeProxyConfig(l layout, nodeIP net.IP) string {
	return fmt.Sprintf(`# Written by realnode.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
bindAddress: %q
clusterCIDR: %q
healthzBindAddress: %q
metricsBindAddress: %q
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, l.kubeProxyKubeconfig(), NodeName, nodeIP.String(), PodCIDR, kubeProxyHealthz, kubeProxyMetrics)
}

func hostOf(hostPort string) string { h, _, _ := strings.Cut(hostPort, ":"); return h }
func portOf(hostPort string) string { _, p, _ := strings.Cut(hostPort, ":"); return p }
