//go:build e2e

package cluster

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
)

// TestChaosCluster is the cluster-operator campaign: StatefulCluster churn — random scale events
// (0–6 replicas) and pod deletions — while the operator is SIGKILLed and restarted, its API requests
// fail at random (apiFaultProxy), pods are force-deleted, kwok nodes go NotReady (their pods are
// replaced after nodeLossToleranceSeconds) and the API server restarts. The checker is
// TestStatefulCluster's watchIdentities, which resumes its watch by itself: a pod name created for a
// second UID (reused identity) or a creation beyond the bound (over-creation) is a violation.
// Operations: scale events and pod deletions.
func TestChaosCluster(t *testing.T) {
	c := framework.NewCampaign(t, "cluster", "StatefulCluster churn (scale events, pod deletions) under operator kills, API errors, force deletes, NotReady nodes and API-server restarts",
		"reused identities + over-creations")
	proxy := framework.StartAPIFaultProxy(t, c.Rand("proxy"))
	op := framework.StartChaosOperator(t, "cluster-operator", proxy)

	ns := framework.NewNamespace(t)
	replicas := 3
	ic := watchIdentities(t, ns, "churn", replicas)
	sc := framework.NewStatefulCluster("churn", int32(replicas))
	sc.Spec.NodeLossToleranceSeconds = ptr.To[int32](5)
	createStatefulCluster(t, ns, sc)
	waitStatefulClusterReady(t, ns, "churn", int32(replicas), 3*time.Minute)

	c.Schedule("operator-kill", 10*time.Second, 30*time.Second, c.KillAndRestart(op))
	c.Schedule("operator-upgrade", 20*time.Second, 60*time.Second, c.UpgradeAndRestart(op))
	c.Schedule("api-errors", 2*time.Second, 6*time.Second, c.APIErrorBursts(proxy, 4*time.Second))
	c.Schedule("pod-force-delete", 2*time.Second, 8*time.Second, c.ForceDeletePod(ns, "app=churn", nil))
	c.Schedule("node-notready", 15*time.Second, 35*time.Second, c.FlipNode(8*time.Second))

	rng := c.Rand("driver")
	ops := c.N(15)
	restartAt := map[int]bool{}
	for range c.APIRestarts() {
		restartAt[1+rng.Intn(ops)] = true
	}
	for i := range ops {
		if restartAt[i] {
			c.RestartAPIServer()
		}
		switch r := rng.Intn(10); {
		case r < 5: // scale to a random size; the bound follows before a raise, after a lowering
			next := rng.Intn(7)
			if next > replicas {
				ic.setBound(next)
			}
			patchStatefulCluster(t, ns, "churn", fmt.Sprintf(`{"spec":{"replicas":%d}}`, next))
			waitStatefulClusterReady(t, ns, "churn", int32(next), 4*time.Minute)
			ic.setBound(next)
			replicas = next
		default: // a pod deleted gracefully (eviction, drain): replaced under a new identity
			live := sortedNames(livePods(t, ns, "churn"))
			if len(live) == 0 {
				continue
			}
			_ = framework.IgnoreGone(framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), live[rng.Intn(len(live))], metav1.DeleteOptions{}))
			waitStatefulClusterReady(t, ns, "churn", int32(replicas), 4*time.Minute)
		}
		c.Op(1)
	}
	c.Halt()
	waitStatefulClusterReady(t, ns, "churn", int32(replicas), 4*time.Minute)
	c.RecordProxyFaults(proxy)
	names, reuses, over := ic.counts()
	t.Logf("chaos cluster: %d identities created, %d reused, %d over-creations", names, reuses, over)
	c.Finish(reuses + over)
}
