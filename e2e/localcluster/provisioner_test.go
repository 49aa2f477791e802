package localcluster

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The kwokctl configuration runs local-provisioner and the cluster DNS as components of the cluster,
// with their working dir (pid file, log) in the cluster dir and their kubeconfig there, which is how
// Down finds them by PID.
func TestConfigRunsTheProvisionerAndTheDNS(t *testing.T) {
	k := newKwokctl(Options{StateDir: "/state", KubeBin: "/kube", KwokBin: "/kwok", ProvisionerBin: "/bin/local-provisioner"})
	k.dnsPort = 10053
	docs := strings.Split(string(k.config()), "\n---\n")
	require.GreaterOrEqual(t, len(docs), 2)
	var cfg struct {
		Kind       string `json:"kind"`
		Components []struct {
			Name, Binary, WorkDir string
			Args                  []string
		} `json:"components"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(docs[1]), &cfg))
	assert.Equal(t, "KwokctlConfiguration", cfg.Kind)
	require.Len(t, cfg.Components, 2)
	c := cfg.Components[0]
	assert.Equal(t, provisionerComponent, c.Name)
	assert.Equal(t, "/bin/local-provisioner", c.Binary)
	assert.Equal(t, k.clusterDir(), c.WorkDir)
	assert.Contains(t, c.Args, "-base-dir=/state/volumes")
	assert.Contains(t, c.Args, "-reap-pods-on-nodes="+kwokManagedNodes, "it reaps the deleted pods of exactly the nodes kwok simulates")

	cmdline := []byte(strings.Join(append([]string{c.Binary}, c.Args...), "\x00") + "\x00")
	assert.True(t, isOwnComponentOf(cmdline, k.clusterDir()), "its process is recognised as the cluster's")
	assert.False(t, isOwnComponentOf(cmdline, "/other/cluster"), "not another cluster's")
	assert.False(t, isOwnComponentOf([]byte("/bin/kubelet\x00--kubeconfig="+k.clusterDir()+"/kubeconfig.yaml\x00"), k.clusterDir()))

	dns := cfg.Components[1]
	assert.Equal(t, clusterDNSComponent, dns.Name)
	assert.Equal(t, "/kube/clusterdns", dns.Binary)
	assert.Equal(t, k.clusterDir(), dns.WorkDir)
	assert.Equal(t, []string{"-kubeconfig=" + k.clusterDir() + "/kubeconfig.yaml", "-port=10053", "-zone=cluster.local"}, dns.Args)
	cmdline = []byte(strings.Join(append([]string{dns.Binary}, dns.Args...), "\x00") + "\x00")
	assert.True(t, isOwnComponentOf(cmdline, k.clusterDir()), "its process is recognised as the cluster's")
	assert.False(t, isOwnComponentOf(cmdline, "/other/cluster"), "not another cluster's")
}

// The cluster DNS's port is kept per state dir: the saved one while the cluster exists, or while it is
// free; a new free one, saved, when it is taken and the cluster is to be created.
func TestClusterDNSPort(t *testing.T) {
	dir := t.TempDir()
	port, err := clusterDNSPort(dir, false)
	require.NoError(t, err)
	assert.Positive(t, port)
	again, err := clusterDNSPort(dir, false)
	require.NoError(t, err)
	assert.Equal(t, port, again, "the saved port, still free")

	taken, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	require.NoError(t, err)
	defer taken.Close()
	again, err = clusterDNSPort(dir, true)
	require.NoError(t, err)
	assert.Equal(t, port, again, "the running cluster's DNS holds its port")
	moved, err := clusterDNSPort(dir, false)
	require.NoError(t, err)
	assert.NotEqual(t, port, moved, "a new cluster moves off a taken port")
	again, err = clusterDNSPort(dir, false)
	require.NoError(t, err)
	assert.Equal(t, moved, again, "and keeps the new one")
}

// The steering binding names exactly RealNodeNamespaces, by the name label every namespace carries.
func TestRealNodeSteeringMatchesNamespacesByName(t *testing.T) {
	policy, binding := realNodeSteering()
	assert.Equal(t, policy.Name, binding.Spec.PolicyName)
	sel := binding.Spec.MatchResources.NamespaceSelector
	require.Len(t, sel.MatchExpressions, 1)
	assert.Equal(t, "kubernetes.io/metadata.name", sel.MatchExpressions[0].Key)
	assert.ElementsMatch(t, RealNodeNamespaces, sel.MatchExpressions[0].Values)
	assert.Len(t, RealNodeNamespaces, 5, "one per operator of deploy/")
}
