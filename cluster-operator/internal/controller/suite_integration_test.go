//go:build integration

package controller

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The integration tests run the controller in a manager against envtest's kube-apiserver and etcd.
// Nothing schedules or runs pods there: a fake kubelet goroutine per test binds new pods to a node,
// sets them Running and Ready (unless the test holds them back) and finishes the deletion of pods
// whose node is Ready, as a kubelet would; pods on a NotReady node stay Terminating.

// suite is the envtest API server and its client.
var suite testsupport.Suite

const (
	wait = 30 * time.Second
	tick = 25 * time.Millisecond
)

// holdAnnotation keeps the fake kubelet away from a pod: "pending" leaves it unscheduled, "notready"
// runs it without Ready; "claimpending", "unschedulable" and "volumeconflict" leave it unscheduled with
// the scheduler's verdict (unschedulable), the first one with its claims not bound.
const holdAnnotation = "test.statefulops.dev/hold"

// unschedulable are the kube-scheduler's PodScheduled=False messages for the holds that have one.
var unschedulable = map[string]string{
	"claimpending":   "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
	"unschedulable":  "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
	"volumeconflict": "0/2 nodes are available: 2 node(s) had volume node affinity conflict. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
}

// bindClaim gives a claim a volume, as the PersistentVolume controller does once a volume exists (the
// volume object itself is not needed here).
func bindClaim(ctx context.Context, ns, name string) {
	claim := &corev1.PersistentVolumeClaim{}
	if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, claim); err != nil || claim.Status.Phase == corev1.ClaimBound {
		return
	}
	if claim.Spec.VolumeName == "" {
		claim.Spec.VolumeName = "pv-" + string(claim.UID)
		if err := suite.Client.Update(ctx, claim); err != nil {
			return
		}
	}
	claim.Status.Phase = corev1.ClaimBound
	_ = suite.Client.Status().Update(ctx, claim)
}

func TestMain(m *testing.M) {
	os.Exit(testsupport.RunSuiteWith(m, &suite, filepath.Join("..", "..", "config", "crd", "bases"), func() error {
		for _, n := range []string{"node-a", "node-b"} {
			if err := setNode(context.Background(), n, true, false); err != nil {
				return err
			}
		}
		return nil
	}, clusterv1alpha1.AddToScheme))
}

// setNode creates or updates a node: Ready or not (since now), tainted out-of-service or not.
func setNode(ctx context.Context, name string, ready, outOfService bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := suite.Client.Create(ctx, node); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			if err := suite.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
				return err
			}
		}
		node.Spec.Taints = nil
		if outOfService {
			node.Spec.Taints = []corev1.Taint{{Key: outOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
		}
		if err := suite.Client.Update(ctx, node); err != nil {
			return err
		}
		status := corev1.ConditionUnknown
		if ready {
			status = corev1.ConditionTrue
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return suite.Client.Status().Update(ctx, node)
	})
}

func nodeIsReady(ctx context.Context, name string) bool {
	node := &corev1.Node{}
	if err := suite.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return false
	}
	return opsutil.NodeReady(node)
}

// startOperator runs the controller; funcs, when set, intercept its writes to inject API errors. The
// returned stop ends it like an operator that dies.
func startOperator(t *testing.T, funcs *interceptor.Funcs) (stop func()) {
	t.Helper()
	opts := Options{}
	if funcs != nil {
		writer, err := client.NewWithWatch(suite.Config, client.Options{Scheme: suite.Scheme})
		require.NoError(t, err)
		opts.Client = interceptor.NewClient(writer, *funcs)
	}
	// The manager's cache is scoped as in production (CacheOptions).
	return suite.StartManager(t, opts.Setup,
		func(o *ctrl.Options) { CacheOptions(&o.Cache) })
}

// fixture is a namespace with a fake kubelet and a pod-creation audit.
type fixture struct {
	t  *testing.T
	ns string

	mu       sync.Mutex
	created  map[string]int // pod name -> how many pods of that name were ever created (ADDED events)
	maxLive  map[string]int // StatefulCluster -> the most pods ever live at once (not terminating, not finished)
	liveNow  map[string]map[string]bool
	adds     int
	watching bool
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cluster-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	f := &fixture{t: t, ns: ns.Name, created: map[string]int{}, maxLive: map[string]int{}, liveNow: map[string]map[string]bool{}}
	f.audit()
	go f.kubelet()
	// The StatefulClusters go with the test (envtest has no garbage collector; the pods stay, orphaned
	// by a dangling controller reference, which the operator never adopts).
	t.Cleanup(func() {
		_ = suite.Client.DeleteAllOf(context.Background(), &clusterv1alpha1.StatefulCluster{}, client.InNamespace(f.ns))
	})
	return f
}

// audit is the invariant checker: it watches the namespace's pods, counts every creation per name
// (a name created twice is a reused identity) and the most pods live at once per StatefulCluster.
func (f *fixture) audit() {
	w, err := suite.Client.Watch(f.t.Context(), &corev1.PodList{}, client.InNamespace(f.ns))
	require.NoError(f.t, err)
	seen := map[string]string{} // name -> UID already counted
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			f.mu.Lock()
			if ev.Type == watch.Added && seen[pod.Name] != string(pod.UID) {
				seen[pod.Name] = string(pod.UID)
				f.created[pod.Name]++
				f.adds++
			}
			owner := pod.Labels[clusterv1alpha1.ClusterNameLabel]
			if owner != "" {
				if f.liveNow[owner] == nil {
					f.liveNow[owner] = map[string]bool{}
				}
				finished := pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
				if ev.Type == watch.Deleted || !pod.DeletionTimestamp.IsZero() || finished {
					delete(f.liveNow[owner], pod.Name)
				} else {
					f.liveNow[owner][pod.Name] = true
				}
				f.maxLive[owner] = max(f.maxLive[owner], len(f.liveNow[owner]))
			}
			f.mu.Unlock()
		}
	}()
	f.t.Cleanup(func() {
		w.Stop()
		f.mu.Lock()
		defer f.mu.Unlock()
		reuses := 0
		for name, n := range f.created {
			if n > 1 {
				reuses += n - 1
				f.t.Errorf("pod name %s created %d times", name, n)
			}
		}
		f.t.Logf("invariant checker: %d pods created, %d reused names", f.adds, reuses)
	})
}

func (f *fixture) maxLiveOf(sc string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxLive[sc]
}

// kubelet plays the scheduler and kubelets of node-a and node-b, polling the namespace.
func (f *fixture) kubelet() {
	ctx := f.t.Context()
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := suite.Client.List(ctx, &pods, client.InNamespace(f.ns)); err == nil {
			for i := range pods.Items {
				f.kubeletStep(ctx, &pods.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (f *fixture) kubeletStep(ctx context.Context, pod *corev1.Pod) {
	hold := pod.Annotations[holdAnnotation]
	if !pod.DeletionTimestamp.IsZero() {
		if pod.Spec.NodeName == "" || nodeIsReady(ctx, pod.Spec.NodeName) {
			_ = suite.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))
		}
		return
	}
	if pod.Spec.NodeName == "" {
		if hold == "pending" {
			return
		}
		// As the scheduler does, a pod waits while a claim it mounts does not exist yet (the operator
		// creates an identity's claims right after its pod).
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			err := suite.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &corev1.PersistentVolumeClaim{})
			if err != nil {
				return
			}
		}
		// As the PersistentVolume controller and a provisioner do, the pod's claims get a volume, unless
		// the test holds them back; then, or when the test makes the pod unschedulable, the scheduler
		// says so in PodScheduled and does not bind the pod.
		if hold != "claimpending" {
			for _, v := range pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					bindClaim(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
				}
			}
		}
		if msg, ok := unschedulable[hold]; ok {
			if c := opsutil.PodCondition(pod, corev1.PodScheduled); c == nil || c.Message != msg {
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
					Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()}}
				_ = suite.Client.Status().Update(ctx, pod)
			}
			return
		}
		node := "node-a"
		if pod.Annotations["test.statefulops.dev/node"] != "" {
			node = pod.Annotations["test.statefulops.dev/node"]
		}
		_ = suite.Client.SubResource("binding").Create(ctx, pod, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		})
		return
	}
	if pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending {
		if !nodeIsReady(ctx, pod.Spec.NodeName) {
			return
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.StartTime = ptr.To(metav1.Now())
		// Every pod "listens" on loopback, where a test's membership-hook server runs.
		pod.Status.PodIP = "127.0.0.1"
		pod.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
		status := corev1.ConditionTrue
		if hold == "notready" {
			status = corev1.ConditionFalse
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		_ = suite.Client.Status().Update(ctx, pod)
	}
}

// statefulCluster returns a StatefulCluster "name" of n replicas with pods labelled app=name.
func (f *fixture) statefulCluster(name string, n int32, mods ...func(*clusterv1alpha1.StatefulCluster)) *clusterv1alpha1.StatefulCluster {
	sc := &clusterv1alpha1.StatefulCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: clusterv1alpha1.StatefulClusterSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:v1"}}},
			},
		},
	}
	for _, m := range mods {
		m(sc)
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), sc))
	return sc
}

// withClaims adds the claim template "data".
func withClaims(sc *clusterv1alpha1.StatefulCluster) {
	sc.Spec.VolumeClaimTemplates = []clusterv1alpha1.PersistentVolumeClaimTemplate{{
		Metadata: clusterv1alpha1.ClaimTemplateMetadata{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
}

// get returns the StatefulCluster, or an empty one when it cannot be read (it is also called from
// the goroutines of Eventually conditions, which must not fail the test).
func (f *fixture) get(name string) *clusterv1alpha1.StatefulCluster {
	sc := &clusterv1alpha1.StatefulCluster{}
	if err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, sc); err != nil {
		f.t.Logf("reading StatefulCluster %s: %v", name, err)
	}
	return sc
}

// update changes a StatefulCluster's spec, retrying on conflicts.
func (f *fixture) update(name string, mod func(*clusterv1alpha1.StatefulCluster)) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc := &clusterv1alpha1.StatefulCluster{}
		if err := suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, sc); err != nil {
			return err
		}
		mod(sc)
		return suite.Client.Update(f.t.Context(), sc)
	}))
}

// pods returns the namespace's pods of a StatefulCluster by name.
func (f *fixture) pods(sc string) map[string]*corev1.Pod {
	var list corev1.PodList
	_ = suite.Client.List(context.Background(), &list, client.InNamespace(f.ns), client.MatchingLabels{clusterv1alpha1.ClusterNameLabel: sc})
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// names returns the sorted names of the pods that are not terminating.
func (f *fixture) liveNames(sc string) []string {
	var names []string
	for name, p := range f.pods(sc) {
		if p.DeletionTimestamp.IsZero() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// waitPods waits until exactly these pods (not terminating) exist, Running and Ready.
func (f *fixture) waitPods(sc string, want ...string) {
	f.t.Helper()
	slices.Sort(want)
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		pods := f.pods(sc)
		var got []string
		for name, p := range pods {
			if p.DeletionTimestamp.IsZero() {
				got = append(got, name)
				ready := opsutil.PodReady(p)
				assert.True(c, ready, "pod %s Ready", name)
			}
		}
		slices.Sort(got)
		assert.Equal(c, want, got)
	}, wait, tick, "pods %s", strings.Join(want, ","))
}

func (f *fixture) pod(name string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
	return pod
}

// setPodStatus changes a pod's status, as a kubelet would.
func (f *fixture) setPodStatus(name string, mod func(*corev1.Pod)) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		mod(pod)
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

func (f *fixture) claims(sc string) map[string]*corev1.PersistentVolumeClaim {
	var list corev1.PersistentVolumeClaimList
	_ = suite.Client.List(context.Background(), &list, client.InNamespace(f.ns), client.MatchingLabels{clusterv1alpha1.ClusterNameLabel: sc})
	out := map[string]*corev1.PersistentVolumeClaim{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// claimsReleased reports whether no live claim of the StatefulCluster has an owner (whenDeleted Retain).
func (f *fixture) claimsReleased(sc string) bool {
	for _, c := range f.claims(sc) {
		if c.DeletionTimestamp.IsZero() && len(c.OwnerReferences) != 0 {
			return false
		}
	}
	return true
}

func ledgerReasons(sc *clusterv1alpha1.StatefulCluster) map[string]clusterv1alpha1.RetirementReason {
	out := map[string]clusterv1alpha1.RetirementReason{}
	for _, rec := range sc.Status.Identities {
		out[rec.Name] = rec.Reason
	}
	return out
}
