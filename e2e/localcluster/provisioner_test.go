package localcluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The kwokctl configuration runs local-provisioner as a component of the cluster, with its working
// dir (pid file, log) in the cluster dir and its kubeconfig there, which is how Down finds it by PID.
func TestConfigRunsTheProvisioner(t *testing.T) {
	k := newKwokctl(Options{StateDir: "/state", KubeBin: "/kube", KwokBin: "/kwok", ProvisionerBin: "/bin/local-provisioner"})
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
	require.Len(t, cfg.Components, 1)
	c := cfg.Components[0]
	assert.Equal(t, provisionerComponent, c.Name)
	assert.Equal(t, "/bin/local-provisioner", c.Binary)
	assert.Equal(t, k.clusterDir(), c.WorkDir)
	assert.Contains(t, c.Args, "-base-dir=/state/volumes")
	assert.Contains(t, c.Args, "-reap-pods-on-nodes="+kwokManagedNodes, "it reaps the deleted pods of exactly the nodes kwok simulates")

	cmdline := []byte(strings.Join(append([]string{c.Binary}, c.Args...), "\x00") + "\x00")
	assert.True(t, isProvisionerOf(cmdline, k.clusterDir()), "its process is recognised as the cluster's")
	assert.False(t, isProvisionerOf(cmdline, "/other/cluster"), "not another cluster's")
	assert.False(t, isProvisionerOf([]byte("/bin/kubelet\x00--kubeconfig="+k.clusterDir()+"/kubeconfig.yaml\x00"), k.clusterDir()))
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
