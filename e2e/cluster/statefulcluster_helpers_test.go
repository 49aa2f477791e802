//go:build e2e

package cluster

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Helpers of statefulcluster_test.go: cluster-operator as a local process and the invariant checker.
// Claims bind through the cluster's default StorageClass (the local cluster's provisioner).

// startClusterOperator runs cluster-operator as a local process for the test (see framework.StartLocalOperator).
func startClusterOperator(t *testing.T) *framework.LocalOperator {
	return framework.StartLocalOperator(t, "cluster-operator")
}

// withDataClaim adds the claim template "data" (1Gi, ReadWriteOnce).
func withDataClaim(sc *clusterv1alpha1.StatefulCluster) {
	sc.Spec.VolumeClaimTemplates = []clusterv1alpha1.PersistentVolumeClaimTemplate{{
		Metadata: clusterv1alpha1.ClaimTemplateMetadata{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
}

func createStatefulCluster(t *testing.T, ns string, sc *clusterv1alpha1.StatefulCluster) {
	t.Helper()
	sc = sc.DeepCopy() // Create fills in the server's metadata: leave the caller's object as it was
	sc.Namespace = ns
	require.NoError(t, framework.Client.Create(t.Context(), sc))
}

// getStatefulCluster reads a StatefulCluster (nil when it cannot be read: also used in conditions).
func getStatefulCluster(t *testing.T, ns, name string) *clusterv1alpha1.StatefulCluster {
	sc := &clusterv1alpha1.StatefulCluster{}
	if err := framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, sc); err != nil {
		return nil
	}
	return sc
}

// patchStatefulCluster applies a JSON merge patch to the spec.
func patchStatefulCluster(t *testing.T, ns, name, patch string) {
	t.Helper()
	sc := &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	require.NoError(t, framework.Client.Patch(t.Context(), sc, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// waitStatefulClusterReady waits for n live, Ready pods of the update revision and condition Ready.
func waitStatefulClusterReady(t *testing.T, ns, name string, n int32, within time.Duration) *clusterv1alpha1.StatefulCluster {
	t.Helper()
	var sc *clusterv1alpha1.StatefulCluster
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sc = getStatefulCluster(t, ns, name)
		require.NotNil(c, sc)
		assert.Equal(c, sc.Generation, sc.Status.ObservedGeneration)
		assert.Equal(c, n, sc.Status.Replicas)
		assert.Equal(c, n, sc.Status.ReadyReplicas)
		assert.Equal(c, n, sc.Status.UpdatedReplicas)
		assert.Equal(c, sc.Status.UpdateRevision, sc.Status.CurrentRevision)
		ready := false
		for _, cond := range sc.Status.Conditions {
			ready = ready || (cond.Type == clusterv1alpha1.ConditionReady && cond.Status == metav1.ConditionTrue)
		}
		assert.True(c, ready, "condition Ready")
	}, within, framework.Tick, "StatefulCluster %s ready with %d pods", name, n)
	return sc
}

// livePods returns the pods of a StatefulCluster that count as live (not terminating, not finished),
// by name.
func livePods(t *testing.T, ns, name string) map[string]*corev1.Pod {
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: clusterv1alpha1.ClusterNameLabel + "=" + name})
	out := map[string]*corev1.Pod{}
	if err != nil {
		return out
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out[p.Name] = p
		}
	}
	return out
}

func sortedNames(pods map[string]*corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	return names
}

// identityChecker is the invariant checker of one StatefulCluster. It watches the pods and records
// every pod name ever created (a name created for a second pod UID is a reused identity: must be 0)
// and the live pods (not terminating, not finished): a creation that makes them exceed the bound
// (replicas plus the surge the strategy allows, set by the test before it scales) is an
// over-creation (must be 0). It also timestamps creations, for replacement latencies.
type identityChecker struct {
	mu            sync.Mutex
	name          string
	uids          map[string]types.UID
	live          map[string]bool
	bound         int
	maxLive       int
	reuses        int
	overCreations int
	createdAt     map[string]time.Time
	createOrder   []string
}

// clusterSummary aggregates every checker of the run, for the SUMMARY line.
var clusterSummary struct {
	mu                               sync.Mutex
	checkers                         []*identityChecker
	latencies, beyondTolerance       []time.Duration
	podsCreated, reuses, overCreated int
}

func watchIdentities(t *testing.T, ns, name string, bound int) *identityChecker {
	t.Helper()
	c := &identityChecker{name: name, uids: map[string]types.UID{}, live: map[string]bool{}, bound: bound, createdAt: map[string]time.Time{}}
	selector := clusterv1alpha1.ClusterNameLabel + "=" + name
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	ctx := t.Context()
	var current watch.Interface = w
	var wmu sync.Mutex
	go func() {
		// The API server closes a watch that falls behind (a loaded machine) or times out: resume from
		// the last resourceVersion seen, so no creation goes unrecorded.
		rv := ""
		for {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					rv = "" // e.g. 410 Gone: start over; pods already seen keep their UID, so nothing counts twice
					break
				}
				if pod, ok := ev.Object.(*corev1.Pod); ok {
					rv = pod.ResourceVersion
					c.observe(ev.Type, pod, time.Now())
				}
			}
			for ctx.Err() == nil {
				next, err := framework.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
				if err == nil {
					w = next
					wmu.Lock()
					current = next
					wmu.Unlock()
					break
				}
				rv = ""
				time.Sleep(100 * time.Millisecond) // test helper, not a reconcile: back off before watching again
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	clusterSummary.mu.Lock()
	clusterSummary.checkers = append(clusterSummary.checkers, c)
	clusterSummary.mu.Unlock()
	t.Cleanup(func() {
		wmu.Lock()
		current.Stop()
		wmu.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Logf("invariant checker %s/%s: %d pod names created, %d reuses, max live %d (bound %d), %d over-creations",
			ns, name, len(c.uids), c.reuses, c.maxLive, c.bound, c.overCreations)
		assert.Zero(t, c.reuses, "reused identities")
		assert.Zero(t, c.overCreations, "over-creations")
	})
	return c
}

func (c *identityChecker) observe(typ watch.EventType, pod *corev1.Pod, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	isNew := false
	if uid, seen := c.uids[pod.Name]; !seen {
		c.uids[pod.Name] = pod.UID
		c.createdAt[pod.Name] = at
		c.createOrder = append(c.createOrder, pod.Name)
		isNew = true
	} else if uid != pod.UID {
		c.reuses++
		c.uids[pod.Name] = pod.UID
		isNew = true
	}
	liveNow := typ != watch.Deleted && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
	if liveNow {
		c.live[pod.Name] = true
	} else {
		delete(c.live, pod.Name)
	}
	c.maxLive = max(c.maxLive, len(c.live))
	if isNew && len(c.live) > c.bound {
		c.overCreations++
	}
}

// setBound sets the most live pods allowed from now on (call before raising replicas, after lowering).
func (c *identityChecker) setBound(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bound = n
}

// createdAfter returns the pods first seen after t, in order, with when.
func (c *identityChecker) createdAfter(t time.Time) ([]string, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	var times []time.Time
	for _, n := range c.createOrder {
		if c.createdAt[n].After(t) {
			names = append(names, n)
			times = append(times, c.createdAt[n])
		}
	}
	return names, times
}

func (c *identityChecker) maxLiveNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxLive
}

func (c *identityChecker) counts() (names, reuses, over int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.uids), c.reuses, c.overCreations
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
