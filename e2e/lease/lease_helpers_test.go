//go:build e2e

package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// Helpers of lease_test.go: the lease-operator as a local process, StatefulSets whose pods' readiness
// the test controls, and the invariant checker.
//
// Readiness on kwok nodes: kwok's pod-ready stage keeps a running pod's Ready condition equal to "all
// its readiness gates are True" (see localcluster/stages/pod-ready.yaml and TestKwokReadinessGate);
// patching Ready directly would be undone by that stage. So the test StatefulSets carry the readiness
// gate leaseGate, a goroutine (readinessKeeper, standing in for the kubelet's probes) sets it True on
// every new pod, and a test makes a pod not Ready by setting its gate False: kwok then flips Ready.

// leaseGate is the readiness gate of the test StatefulSets' pods.
const leaseGate = "statefulops.dev/e2e-ready"

// startLeaseOperator runs lease-operator as a local process for the test (see framework.StartLocalOperator).
func startLeaseOperator(t *testing.T) *framework.LocalOperator {
	return framework.StartLocalOperator(t, "lease-operator")
}

// leaseStatefulSet creates a StatefulSet of pause pods with the readiness gate, started in parallel,
// each staying Terminating for 2s when deleted, and waits until all replicas are Ready.
func leaseStatefulSet(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	template := framework.PodTemplate(name)
	template.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "2"}
	template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: leaseGate}}
	template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:            template,
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	_, err := framework.Clientset.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	framework.WaitStatefulSetReady(t, ns, name, replicas)
}

// readinessKeeper sets the gate True on every pod of the namespace that has no gate condition yet,
// like a kubelet whose readiness probe passes; pods a test set False stay False.
func readinessKeeper(t *testing.T, ns string) {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || framework.PodCondition(pod, leaseGate) != "" {
				continue
			}
			_ = patchGate(t.Context(), ns, pod.Name, true)
		}
	}()
}

func patchGate(ctx context.Context, ns, pod string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: leaseGate, Status: status, LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return err
	}
	_, err = framework.Clientset.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// setGate makes the pod Ready (true) or not Ready (false) through its readiness gate.
func setGate(t *testing.T, ns, pod string, ready bool) {
	t.Helper()
	require.NoError(t, patchGate(t.Context(), ns, pod, ready))
}

// lockSpec is the spec of a test StatefulSetLock.
type lockSpec struct {
	name, statefulSet, lease string
	duration, failoverDelay  int64
}

func createLock(t *testing.T, ns string, s lockSpec) {
	t.Helper()
	lock := &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name},
		Spec: leasev1.StatefulSetLockSpec{StatefulSetName: s.statefulSet, LeaseName: s.lease,
			LeaseDurationSeconds: int32(s.duration), FailoverDelaySeconds: int32(s.failoverDelay)},
	}
	require.NoError(t, framework.Client.Create(t.Context(), lock))
}

// patchLock applies a JSON merge patch to the lock.
func patchLock(t *testing.T, ns, name string, patch map[string]any) {
	t.Helper()
	raw, err := json.Marshal(patch)
	require.NoError(t, err)
	lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	require.NoError(t, framework.Client.Patch(t.Context(), lock, client.RawPatch(types.MergePatchType, raw)))
}

// lockCondition returns the reason of the lock's condition of that type when its status is status.
func lockCondition(t *testing.T, ns, name, condType string) (status, reason string) {
	lock := &leasev1.StatefulSetLock{}
	if err := framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, lock); err != nil {
		return "", ""
	}
	for _, c := range lock.Status.Conditions {
		if c.Type == condType {
			return string(c.Status), c.Reason
		}
	}
	return "", ""
}

// leaseState returns the Lease's holder and leaseTransitions.
func leaseState(t *testing.T, ns, name string) (string, int32) {
	t.Helper()
	lease, err := framework.Clientset.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseTransitions, 0)
}

// checker is the invariant checker of a namespace. It watches the pods and counts the watch events
// after which two pods carry sts-role=writer (must stay 0); it measures failover latency — from the
// event showing the writer unusable (not Ready, terminating or deleted) to the event showing another
// pod labelled writer — and counts the operator's API writes as the watches see them: role-label or
// epoch changes of pods, Lease writes and StatefulSetLock writes.
type checker struct {
	mu         sync.Mutex
	ns         string
	pods       map[string]*corev1.Pod
	writer     string
	unusableAt time.Time
	doubles    int
	events     int
	latencies  []time.Duration
	// podWrites, leaseWrites, lockWrites count observed writes.
	podWrites, leaseWrites, lockWrites int
	// excluded keeps the scenario's latencies out of the headline figure (failoverDelaySeconds or
	// operator downtime make them long on purpose).
	excluded bool
}

// excludeLatency keeps this scenario's latencies out of the summary's headline percentiles.
func (c *checker) excludeLatency() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.excluded = true
}

// watchLease starts the checker of a namespace; it reports when the test ends.
func watchLease(t *testing.T, ns string) *checker {
	t.Helper()
	c := &checker{ns: ns, pods: map[string]*corev1.Pod{}}
	podWatch, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	leaseWatch, err := framework.Clientset.CoordinationV1().Leases(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	lockWatch, err := framework.Client.Watch(t.Context(), &leasev1.StatefulSetLockList{}, client.InNamespace(ns))
	require.NoError(t, err)
	go func() {
		for ev := range podWatch.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				c.pod(ev.Type, pod, time.Now())
			}
		}
	}()
	go func() {
		for range leaseWatch.ResultChan() {
			c.mu.Lock()
			c.leaseWrites++
			c.mu.Unlock()
		}
	}()
	go func() {
		for ev := range lockWatch.ResultChan() {
			if ev.Type == watch.Modified {
				c.mu.Lock()
				c.lockWrites++
				c.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		podWatch.Stop()
		leaseWatch.Stop()
		lockWatch.Stop()
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Logf("invariant checker %s: %d pod events, %d instants with two writers; %d failovers measured, latency %s",
			ns, c.events, c.doubles, len(c.latencies), summarize(c.latencies))
		assert.Zero(t, c.doubles, "instants with two pods labelled sts-role=writer")
		leaseResults.add(c.latencies, c.doubles, c.excluded)
	})
	return c
}

func usablePod(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && framework.PodCondition(pod, corev1.PodReady) == corev1.ConditionTrue
}

func (c *checker) pod(typ watch.EventType, pod *corev1.Pod, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events++
	old := c.pods[pod.Name]
	if old != nil && (old.Labels[leasev1.RoleLabel] != pod.Labels[leasev1.RoleLabel] ||
		old.Annotations[leasev1.WriterEpochAnnotation] != pod.Annotations[leasev1.WriterEpochAnnotation]) && typ != watch.Deleted {
		c.podWrites++
	}
	if typ == watch.Deleted {
		delete(c.pods, pod.Name)
	} else {
		c.pods[pod.Name] = pod
	}
	if pod.Name == c.writer {
		switch {
		case typ == watch.Deleted || !usablePod(pod):
			if c.unusableAt.IsZero() {
				c.unusableAt = at
			}
		default:
			c.unusableAt = time.Time{} // a flap the writer recovered from
		}
	}
	var writers []string
	for name, p := range c.pods {
		if p.Labels[leasev1.RoleLabel] == leasev1.RoleWriter {
			writers = append(writers, name)
		}
	}
	if len(writers) > 1 {
		c.doubles++
	}
	if len(writers) == 1 && writers[0] != c.writer {
		if !c.unusableAt.IsZero() {
			c.latencies = append(c.latencies, at.Sub(c.unusableAt))
		}
		c.writer, c.unusableAt = writers[0], time.Time{}
	}
}

// snapshot returns the current writer, the failovers measured so far and the observed write counts.
func (c *checker) snapshot() (writer string, failovers, podWrites, leaseWrites, lockWrites int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writer, len(c.latencies), c.podWrites, c.leaseWrites, c.lockWrites
}

// waitNewWriter waits until the writer is not `old` (and is some pod) and returns it.
func (c *checker) waitNewWriter(t *testing.T, old string) string {
	t.Helper()
	var w string
	require.Eventually(t, func() bool {
		w, _, _, _, _ = c.snapshot()
		return w != "" && w != old
	}, framework.Timeout, 10*time.Millisecond, "a writer other than %q", old)
	return w
}

// waitWriter waits until there is a writer and returns it.
func (c *checker) waitWriter(t *testing.T) string { return c.waitNewWriter(t, "") }

// rolesSettled waits until every pod of the namespace carries a role label and exactly one is writer.
func rolesSettled(t *testing.T, ns string) string {
	t.Helper()
	var writer string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		var writers []string
		for _, p := range pods.Items {
			role := p.Labels[leasev1.RoleLabel]
			assert.Contains(c, []string{leasev1.RoleWriter, leasev1.RoleReader}, role, "pod %s role", p.Name)
			if role == leasev1.RoleWriter {
				writers = append(writers, p.Name)
			}
		}
		require.Len(c, writers, 1)
		writer = writers[0]
	}, framework.Timeout, framework.Tick)
	return writer
}

// leaseResults gathers the figures of every lease e2e test for the summary TestLease prints.
var leaseResults = &results{}

type results struct {
	mu sync.Mutex
	// latencies are those of scenarios with the operator running and no failover delay; failovers
	// counts every measured failover.
	latencies []time.Duration
	failovers int
	doubles   int
	tests     int
}

func (r *results) add(latencies []time.Duration, doubles int, excluded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !excluded {
		r.latencies = append(r.latencies, latencies...)
	}
	r.failovers += len(latencies)
	r.doubles += doubles
	r.tests++
}

// summarize renders p50/p99/max of durations.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}
