//go:build e2e

package cluster

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
)

// TestStatefulClusterStableDNSNames: with spec.serviceName and a headless Service of that name, each
// member of a StatefulCluster on the real node is found by its stable name through the local cluster's
// DNS, as another pod sees it: `<pod>.<service>` (through the pod's search domains) and
// `<pod>.<service>.<ns>.svc.cluster.local` resolve to that member's pod IP. When a member is replaced
// by a new identity (its process killed, unhealthyThresholdSeconds 0), the new name resolves to the
// new pod and the old name is gone (NXDOMAIN). The names are asked by a separate pod, `testapp
// resolve` in it: a member's own name would come from its /etc/hosts, which the kubelet writes.
func TestStatefulClusterStableDNSNames(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "cluster-operator-system",
		"deployment/cluster-operator-controller-manager", "--timeout=120s")
	require.NoError(t, err)

	ns := framework.NewNamespace(t)
	_, err = framework.Clientset.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "members"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "db"},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 8080}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	framework.CreatePod(t, ns, framework.TestAppPod("resolver"))

	pod := framework.TestAppPod("db")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	sc := framework.NewStatefulCluster("db", 2)
	sc.Spec.ServiceName = "members"
	sc.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	sc.Spec.UnhealthyThresholdSeconds = ptr.To[int32](0)
	createStatefulCluster(t, ns, sc)
	waitStatefulClusterReady(t, ns, "db", 2, 3*framework.Timeout)

	fqdn := func(member string) string {
		return fmt.Sprintf("%s.members.%s.svc.%s.", member, ns, localcluster.ClusterDomain)
	}
	// resolvesTo waits until every name resolves, in the resolver pod, to exactly the address want has
	// for it ("NXDOMAIN": the DNS says it does not exist).
	resolvesTo := func(want map[string]string) {
		t.Helper()
		names := make([]string, 0, len(want))
		for name := range want {
			names = append(names, name)
		}
		var out string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var err error
			out, err = framework.KubectlOnRealNode(t, append([]string{"exec", "-n", ns, "resolver", "--", "/testapp", "resolve"}, names...)...)
			require.NoError(c, err, "testapp resolve in pod resolver: %s", out)
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				name, addrs, _ := strings.Cut(line, " ")
				got[name] = addrs
			}
			assert.Equal(c, want, got, "names resolved in pod resolver")
		}, framework.Timeout, framework.Tick)
		t.Logf("resolved in pod resolver:\n%s", strings.TrimSpace(out))
	}

	members := livePods(t, ns, "db")
	require.Equal(t, []string{"db-0", "db-1"}, sortedNames(members))
	want := map[string]string{}
	for name, p := range members {
		require.NotEmpty(t, p.Status.PodIP, name)
		assert.Equal(t, name, p.Spec.Hostname)
		assert.Equal(t, "members", p.Spec.Subdomain)
		want[name+".members"] = p.Status.PodIP
		want[fqdn(name)] = p.Status.PodIP
	}
	assert.NotEqual(t, members["db-0"].Status.PodIP, members["db-1"].Status.PodIP)
	resolvesTo(want)

	require.NoError(t, syscall.Kill(framework.TestAppPID(t, ns, "db-1"), syscall.SIGKILL))
	require.Eventually(t, func() bool {
		p, ok := livePods(t, ns, "db")["db-2"]
		return ok && framework.PodCondition(p, corev1.PodReady) == corev1.ConditionTrue
	}, 3*framework.Timeout, framework.Tick, "db-1 replaced by a new identity, db-2, Ready")
	waitStatefulClusterReady(t, ns, "db", 2, framework.Timeout)
	members = livePods(t, ns, "db")
	require.Equal(t, []string{"db-0", "db-2"}, sortedNames(members))
	// The old name is asked fully qualified only: under a search list, a name that is nowhere ends with
	// the answer for the name as given ("db-1.members."), outside the cluster domain, which the
	// cluster DNS refuses rather than denies.
	resolvesTo(map[string]string{
		"db-0.members": members["db-0"].Status.PodIP,
		fqdn("db-0"):   members["db-0"].Status.PodIP,
		"db-2.members": members["db-2"].Status.PodIP,
		fqdn("db-2"):   members["db-2"].Status.PodIP,
		fqdn("db-1"):   "NXDOMAIN",
	})
}
