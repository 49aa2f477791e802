//go:build integration

package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The integration tests run the controller in a manager against envtest's kube-apiserver and etcd.
// Nothing runs Deployments or kubelets there: the tests create the pods as the webhook would have
// admitted them (managed label, hold) and play the kubelet (status, confirming deletions with a
// zero-grace delete).

// suite is the envtest API server and its client.
var suite testsupport.Suite

const (
	wait = 20 * time.Second
	tick = 20 * time.Millisecond
)

func TestMain(m *testing.M) {
	os.Exit(testsupport.RunSuite(m, &suite, filepath.Join("..", "..", "config", "crd", "bases"), singletonv1.AddToScheme))
}

// startOperator runs the controller until stop (or the test's end); funcs, when set, intercept its
// writes to inject API errors.
func startOperator(t *testing.T, funcs *interceptor.Funcs) (stop func()) {
	t.Helper()
	stop, _ = startOperatorWithManager(t, funcs)
	return stop
}

// startOperatorWithManager is startOperator, also returning the manager (to look into its cache).
func startOperatorWithManager(t *testing.T, funcs *interceptor.Funcs) (stop func(), mgr ctrl.Manager) {
	t.Helper()
	return startOperatorWithOptions(t, Options{}, funcs)
}

// startOperatorWithOptions is startOperatorWithManager with opts (e.g. connected to a grant server's
// Exits).
func startOperatorWithOptions(t *testing.T, opts Options, funcs *interceptor.Funcs) (stop func(), mgr ctrl.Manager) {
	t.Helper()
	if funcs != nil {
		writer, err := client.NewWithWatch(suite.Config, client.Options{Scheme: suite.Scheme})
		require.NoError(t, err)
		opts.Client = interceptor.NewClient(writer, *funcs)
	}
	stop = suite.StartManager(t, func(ctx context.Context, m ctrl.Manager) error {
		mgr = m
		return opts.Setup(ctx, m)
	}, func(o *ctrl.Options) { CacheOptions(&o.Cache) }) // the cache scope of main
	return stop, mgr
}

// fixture is a namespace with a Ready node "node-a".
type fixture struct {
	t  *testing.T
	ns string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "singleton-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	ensureNode(t, "node-a", true, false)
	return &fixture{t: t, ns: ns.Name}
}

func ensureNode(t *testing.T, name string, ready, outOfService bool) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := suite.Client.Create(ctx, node); err != nil {
		require.NoError(t, suite.Client.Get(ctx, client.ObjectKey{Name: name}, node))
	}
	node.Spec.Taints = nil
	if outOfService {
		node.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	}
	require.NoError(t, suite.Client.Update(ctx, node))
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	require.NoError(t, suite.Client.Status().Update(ctx, node))
}

func (f *fixture) createSingleton(name string, mods ...func(*singletonv1.StatefulSingleton)) *singletonv1.StatefulSingleton {
	ss := &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       singletonv1.StatefulSingletonSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	for _, m := range mods {
		m(ss)
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), ss))
	return ss
}

func (f *fixture) singleton(name string) *singletonv1.StatefulSingleton {
	ss := &singletonv1.StatefulSingleton{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, ss))
	return ss
}

// singletonGone reports whether the StatefulSingleton is gone from the API server.
func (f *fixture) singletonGone(name string) bool {
	err := suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, &singletonv1.StatefulSingleton{})
	return apierrors.IsNotFound(err)
}

// namespaceLabel is the fixture namespace's webhook label.
func (f *fixture) namespaceLabel() string {
	ns := &corev1.Namespace{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Name: f.ns}, ns))
	return ns.Labels[singletonv1.LabelNamespaceEnabled]
}

// createReplicaSet creates a ReplicaSet with the Deployment revision annotation (a pod owner for ranking).
func (f *fixture) createReplicaSet(name string, revision int) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: map[string]string{revisionAnnotation: fmt.Sprint(revision)}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db", "rs": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db", "rs": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "db"}}},
			},
		},
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), rs))
	return rs
}

// podOpt shapes a pod the test creates.
type podOpt func(*corev1.Pod)

// held: admitted by the webhook with the given hold.
func held(mode singletonv1.HoldMode) podOpt {
	return func(p *corev1.Pod) {
		p.Labels[singletonv1.LabelManaged] = "true"
		p.Labels[singletonv1.LabelSingleton] = "db" // as the webhook labels the pods of StatefulSingleton db
		p.Annotations[singletonv1.AnnotationHoldMode] = string(mode)
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: singletonv1.ReadinessGate}}
		if mode == singletonv1.HoldModeSchedulingGate {
			p.Spec.NodeName = ""
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}}
		}
	}
}

// releasedAt: a pod already released with the epoch (e.g. before the operator ran).
func releasedAt(epoch int) podOpt {
	return func(p *corev1.Pod) {
		held(singletonv1.HoldModeWrapper)(p)
		p.Annotations[singletonv1.AnnotationEpoch] = fmt.Sprint(epoch)
		p.Annotations[singletonv1.AnnotationStartGranted] = fmt.Sprint(epoch)
	}
}

func ownedBy(rs *appsv1.ReplicaSet) podOpt {
	return func(p *corev1.Pod) {
		p.Labels["rs"] = rs.Name
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
	}
}

func onNode(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// createPod creates a pod labelled app=db on node-a, Running (as the kubelet would report it).
func (f *fixture) createPod(name string, opts ...podOpt) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": "db"}, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main", Image: "db"}}},
	}
	for _, o := range opts {
		o(pod)
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), pod))
	if pod.Spec.NodeName != "" {
		f.setPhase(name, corev1.PodRunning)
	}
	return pod
}

// setPhase reports the pod's phase (Failed/Succeeded with its container terminated) as the kubelet would.
func (f *fixture) setPhase(name string, phase corev1.PodPhase) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		pod.Status.Phase = phase
		state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
			state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.Now()}}
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "db", ImageID: "db", State: state}}
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

// setStarting reports the pod Pending with its containers still being created, as the kubelet would.
func (f *fixture) setStarting(name string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "db", ImageID: "db",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

func (f *fixture) pod(name string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
	return pod
}

// confirmStop deletes the pod with a zero grace period: the kubelet confirmed the stop (or a force delete).
func (f *fixture) confirmStop(name string) {
	f.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	require.NoError(f.t, client.IgnoreNotFound(suite.Client.Delete(f.t.Context(), pod, client.GracePeriodSeconds(0))))
}

// released reports whether the pod carries the epoch annotation (and the grant or no scheduling gate).
func (f *fixture) released(name string) bool {
	pod := &corev1.Pod{}
	if err := suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
		return false
	}
	return classify(pod) == stateReleased
}

func (f *fixture) waitReleased(name string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.released(name) }, wait, tick, "pod %s released", name)
}

func (f *fixture) neverReleased(name string, d time.Duration) {
	f.t.Helper()
	testsupport.NeverWithin(f.t, d, tick, func() bool { return f.released(name) }, "pod %s must stay held", name)
}

func (f *fixture) waitCondition(ss, typ string, status metav1.ConditionStatus) *singletonv1.StatefulSingleton {
	f.t.Helper()
	var got *singletonv1.StatefulSingleton
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		got = f.singleton(ss)
		cond := findCondition(got, typ)
		if assert.NotNil(c, cond, "condition %s", typ) {
			assert.Equal(c, status, cond.Status)
		}
	}, wait, tick)
	return got
}

func findCondition(ss *singletonv1.StatefulSingleton, typ string) *metav1.Condition {
	for i := range ss.Status.Conditions {
		if ss.Status.Conditions[i].Type == typ {
			return &ss.Status.Conditions[i]
		}
	}
	return nil
}

// overlapChecker is the invariant checker: it watches the namespace's pods and counts the watch
// events after which two pods are released and not terminal. It also collects every epoch stamped.
type overlapChecker struct {
	overlaps, events atomic.Int64
	mu               sync.Mutex
	epochs           map[types.UID]int64
}

func watchOverlaps(t *testing.T, ns string) *overlapChecker {
	t.Helper()
	w, err := suite.Client.Watch(t.Context(), &corev1.PodList{}, client.InNamespace(ns))
	require.NoError(t, err)
	oc := &overlapChecker{epochs: map[types.UID]int64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		running := map[types.UID]bool{}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			running[pod.UID] = ev.Type != watch.Deleted && classify(pod) == stateReleased
			if e := podEpoch(pod); e > 0 {
				oc.mu.Lock()
				oc.epochs[pod.UID] = e
				oc.mu.Unlock()
			}
			n := 0
			for _, r := range running {
				if r {
					n++
				}
			}
			oc.events.Add(1)
			if n > 1 {
				oc.overlaps.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
		t.Logf("invariant checker: %d pod events, %d with two released pods", oc.events.Load(), oc.overlaps.Load())
		assert.Zero(t, oc.overlaps.Load(), "overlaps")
	})
	return oc
}
