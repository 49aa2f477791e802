//go:build integration

package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The integration tests run the controller in a manager against envtest's kube-apiserver and etcd.
// Nothing runs StatefulSets or kubelets there: the tests create the pods of a StatefulSet themselves
// (owned by it, as the StatefulSet controller would) and set their Ready condition.

// suite is the envtest API server; k8s its client.
var suite testsupport.Suite

const (
	wait = 20 * time.Second
	tick = 20 * time.Millisecond
)

func TestMain(m *testing.M) {
	os.Exit(testsupport.RunSuite(m, &suite, filepath.Join("..", "..", "config", "crd", "bases"), leasev1.AddToScheme))
}

// operator is one running manager with the controller; stop ends it (like an operator that dies).
type operator struct {
	stop func()
}

// startOperator runs the controller; funcs, when set, intercept its writes to inject API errors.
func startOperator(t *testing.T, funcs *interceptor.Funcs) *operator {
	t.Helper()
	opts := Options{}
	if funcs != nil {
		writer, err := client.NewWithWatch(suite.Config, client.Options{Scheme: suite.Scheme})
		require.NoError(t, err)
		opts.Client = interceptor.NewClient(writer, *funcs)
	}
	return &operator{stop: suite.StartManager(t, func(ctx context.Context, mgr ctrl.Manager) error {
		return opts.Setup(ctx, mgr)
	}, func(o *ctrl.Options) { CacheOptions(&o.Cache) })} // the cache scope of main
}

// fixture is a namespace with a Ready node and a StatefulSet "db" whose pods the test creates.
type fixture struct {
	t   *testing.T
	ns  string
	sts *appsv1.StatefulSet
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	ensureNode(t, "node-a", true)
	f := &fixture{t: t, ns: ns.Name}
	f.createStatefulSet()
	return f
}

func ensureNode(t *testing.T, name string, ready bool) {
	t.Helper()
	ctx := context.Background() // also from a cleanup, after t.Context() ended
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := suite.Client.Create(ctx, node); err != nil {
		require.NoError(t, suite.Client.Get(ctx, client.ObjectKey{Name: name}, node))
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	require.NoError(t, suite.Client.Status().Update(ctx, node))
}

func (f *fixture) createStatefulSet() {
	f.sts = &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "db"}}},
			},
		},
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), f.sts))
}

// createPods creates db-0..db-(n-1), Ready, as the StatefulSet controller and kubelet would.
func (f *fixture) createPods(n int) {
	for i := range n {
		f.createPod(i, true)
	}
}

func (f *fixture) createPod(ordinal int, ready bool) *corev1.Pod {
	return f.createPodOn(ordinal, ready, "node-a")
}

func (f *fixture) createPodOn(ordinal int, ready bool, node string) *corev1.Pod {
	return f.createPodOf(f.sts, ordinal, ready, node)
}

// createPodOf creates pod <sts>-<ordinal> of that StatefulSet on the node, as the StatefulSet controller
// and kubelet would.
func (f *fixture) createPodOf(sts *appsv1.StatefulSet, ordinal int, ready bool, node string) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns,
			Labels: map[string]string{"app": sts.Name, appsv1.StatefulSetPodNameLabel: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: sts.Name}}},
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), pod))
	f.setReady(name, ready)
	return pod
}

// setReady sets the pod's Ready condition, as the kubelet would (retrying when the operator's label
// patch came in between).
func (f *fixture) setReady(name string, ready bool) {
	f.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := f.pod(name)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		return suite.Client.Status().Update(f.t.Context(), pod)
	}))
}

func (f *fixture) pod(name string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, pod))
	return pod
}

func (f *fixture) createLock(name string, duration int32, mods ...func(*leasev1.StatefulSetLock)) *leasev1.StatefulSetLock {
	lock := &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "db", LeaseName: name + "-lease", LeaseDurationSeconds: duration},
	}
	for _, m := range mods {
		m(lock)
	}
	require.NoError(f.t, suite.Client.Create(f.t.Context(), lock))
	return lock
}

func (f *fixture) lock(name string) *leasev1.StatefulSetLock {
	lock := &leasev1.StatefulSetLock{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, lock))
	return lock
}

// switchover asks for a planned switchover of the lock to the pod (retrying when the operator's status
// write came in between the read and the update).
func (f *fixture) switchover(lock, pod string) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := f.lock(lock)
		l.Annotations = map[string]string{leasev1.SwitchoverAnnotation: pod}
		return suite.Client.Update(f.t.Context(), l)
	}))
}

func (f *fixture) lease(name string) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, lease))
	return lease
}

// roles returns each pod's role label ("-" when it has none) and the writer's epoch.
func (f *fixture) roles() (map[string]string, string) {
	var pods corev1.PodList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &pods, client.InNamespace(f.ns)))
	roles, epoch := map[string]string{}, ""
	for _, p := range pods.Items {
		role, ok := p.Labels[leasev1.RoleLabel]
		if !ok {
			role = "-"
		}
		roles[p.Name] = role
		if role == leasev1.RoleWriter {
			epoch = p.Annotations[leasev1.WriterEpochAnnotation]
		}
	}
	return roles, epoch
}

// waitWriter waits until exactly `writer` carries the writer label (with the given epoch, when not
// empty) and every other pod is a reader.
func (f *fixture) waitWriter(writer, epoch string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		roles, gotEpoch := f.roles()
		for name, role := range roles {
			want := leasev1.RoleReader
			if name == writer {
				want = leasev1.RoleWriter
			}
			assert.Equal(c, want, role, "pod %s", name)
		}
		if epoch != "" {
			assert.Equal(c, epoch, gotEpoch)
		}
	}, wait, tick, "writer %s", writer)
}

// writerWatch is the invariant checker: it watches the namespace's pods and counts the watch events
// after which two pods carry sts-role=writer.
type writerWatch struct {
	doubles, events atomic.Int64
	stop            func()
}

func watchWriters(t *testing.T, ns string) *writerWatch {
	t.Helper()
	w, err := suite.Client.Watch(t.Context(), &corev1.PodList{}, client.InNamespace(ns))
	require.NoError(t, err)
	ww := &writerWatch{stop: w.Stop}
	go func() {
		writers := map[string]bool{}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			writers[pod.Name] = ev.Type != watch.Deleted && pod.Labels[leasev1.RoleLabel] == leasev1.RoleWriter
			n := 0
			for _, isWriter := range writers {
				if isWriter {
					n++
				}
			}
			ww.events.Add(1)
			if n > 1 {
				ww.doubles.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		t.Logf("invariant checker: %d pod events, %d with two writers", ww.events.Load(), ww.doubles.Load())
		assert.Zero(t, ww.doubles.Load(), "instants with two writers")
	})
	return ww
}

func key(obj client.Object) types.NamespacedName { return client.ObjectKeyFromObject(obj) }
