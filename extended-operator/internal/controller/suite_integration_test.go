//go:build integration

package controller

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// The integration tests run the controller in a manager against envtest's kube-apiserver and etcd.
// Nothing runs StatefulSets, pods or the garbage collector there: the tests set the StatefulSets'
// status (as the StatefulSet controller would) and create pods themselves where a test needs them.

// suite is the envtest API server and its client.
var suite testsupport.Suite

const (
	wait = 20 * time.Second
	tick = 20 * time.Millisecond
)

func TestMain(m *testing.M) {
	// The operator's namespace, where every operator the tests start finds (the first creates) the
	// config hash key Secret.
	os.Exit(testsupport.RunSuiteWith(m, &suite, filepath.Join("..", "..", "config", "crd", "bases"), func() error {
		ns, _, _ := strings.Cut(DefaultHashKeySecret, "/")
		return suite.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}, extendedv1alpha1.AddToScheme))
}

// operator is one running manager with the controller; stop ends it (like an operator that dies).
type operator struct {
	stop func()
}

// startOperator runs the controller; funcs, when set, intercept its writes to inject API errors.
func startOperator(t *testing.T, funcs *interceptor.Funcs) *operator {
	t.Helper()
	opts := Options{ConfigQuietPeriod: 500 * time.Millisecond, ConfigMaxDelay: 5 * time.Second}
	if funcs != nil {
		writer, err := client.NewWithWatch(suite.Config, client.Options{Scheme: suite.Scheme})
		require.NoError(t, err)
		opts.Client = interceptor.NewClient(writer, *funcs)
	}
	return &operator{stop: suite.StartManager(t, opts.Setup,
		func(o *ctrl.Options) { CacheOptions(&o.Cache) })} // as main.go does
}

// fixture is a namespace with one ExtendedStatefulSet "web".
type fixture struct {
	t    *testing.T
	ns   string
	name string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ests-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	return &fixture{t: t, ns: ns.Name, name: "web"}
}

// ests returns an ExtendedStatefulSet "web" with replicas pods of image, updateOnEnvChange on.
func (f *fixture) newESTS(replicas int32, image string) *extendedv1alpha1.ExtendedStatefulSet {
	return &extendedv1alpha1.ExtendedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: f.name, Namespace: f.ns},
		Spec: extendedv1alpha1.ExtendedStatefulSetSpec{
			UpdateOnEnvChange: ptr.To(true),
			UpdateStrategy: extendedv1alpha1.UpdateStrategy{
				Canaries:        ptr.To[int32](1),
				CanaryWatchTime: &metav1.Duration{Duration: time.Minute},
				UpdateWatchTime: &metav1.Duration{Duration: time.Minute},
				// The operator's quiet period in these tests (startOperator), not the schema's 2s.
				ConfigChangeQuietPeriod: &metav1.Duration{Duration: 500 * time.Millisecond},
			},
			Template: extendedv1alpha1.StatefulSetTemplate{
				Spec: appsv1.StatefulSetSpec{
					Replicas:    ptr.To(replicas),
					ServiceName: "web",
					Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
					},
				},
			},
		},
	}
}

func (f *fixture) create(ests *extendedv1alpha1.ExtendedStatefulSet) {
	f.t.Helper()
	require.NoError(f.t, suite.Client.Create(f.t.Context(), ests))
}

// get returns the ExtendedStatefulSet.
func (f *fixture) get() *extendedv1alpha1.ExtendedStatefulSet {
	f.t.Helper()
	ests := &extendedv1alpha1.ExtendedStatefulSet{}
	require.NoError(f.t, suite.Client.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: f.name}, ests))
	return ests
}

// update changes the ExtendedStatefulSet's spec, retrying on conflicts.
func (f *fixture) update(mutate func(*extendedv1alpha1.ExtendedStatefulSet)) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ests := f.get()
		mutate(ests)
		return suite.Client.Update(f.t.Context(), ests)
	}))
}

// sts returns the StatefulSet of a version, nil when it does not exist.
func (f *fixture) sts(version int) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	err := suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: f.name + "-v" + strconv.Itoa(version)}, sts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(f.t, err)
	return sts
}

// waitSTS waits until the version's StatefulSet exists and cond holds for it.
func (f *fixture) waitSTS(version int, cond func(c *assert.CollectT, sts *appsv1.StatefulSet), msg string) *appsv1.StatefulSet {
	f.t.Helper()
	var got *appsv1.StatefulSet
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		sts := f.sts(version)
		if !assert.NotNil(c, sts, "StatefulSet of version %d", version) {
			return
		}
		cond(c, sts)
		got = sts
	}, wait, tick, msg)
	return got
}

// waitGone waits until the version's StatefulSet is deleted.
func (f *fixture) waitGone(version int) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.sts(version) == nil }, wait, tick, "version %d deleted", version)
}

// setStatus plays the StatefulSet controller: replicas pods exist, ready of them Ready, all updated.
func (f *fixture) setStatus(version int, ready int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts(version)
		require.NotNil(f.t, sts)
		n := ptr.Deref(sts.Spec.Replicas, 1)
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: min(ready, n), AvailableReplicas: min(ready, n),
			CurrentReplicas: n, UpdatedReplicas: n, CurrentRevision: "r1", UpdateRevision: "r1",
		}
		return suite.Client.Status().Update(f.t.Context(), sts)
	}))
}

// waitCondition waits until the ExtendedStatefulSet's condition has the status (and reason, when set).
func (f *fixture) waitCondition(condType string, status metav1.ConditionStatus, reason string) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		ests := f.get()
		var found *metav1.Condition
		for i := range ests.Status.Conditions {
			if ests.Status.Conditions[i].Type == condType {
				found = &ests.Status.Conditions[i]
			}
		}
		if !assert.NotNil(c, found, "condition %s", condType) {
			return
		}
		assert.Equal(c, status, found.Status, "condition %s: %s", condType, found.Message)
		if reason != "" {
			assert.Equal(c, reason, found.Reason, "condition %s: %s", condType, found.Message)
		}
	}, wait, tick, "condition %s=%s", condType, status)
}

// templateChanges watches the namespace's StatefulSets and counts, per StatefulSet, the changes of the
// config-hash annotation of the pod template (each one is a roll of its pods).
type templateChanges struct {
	mu     sync.Mutex
	hashes map[string]string
	counts map[string]int
}

func watchTemplateChanges(t *testing.T, ns string) *templateChanges {
	t.Helper()
	w, err := suite.Client.Watch(t.Context(), &appsv1.StatefulSetList{}, client.InNamespace(ns))
	require.NoError(t, err)
	tc := &templateChanges{hashes: map[string]string{}, counts: map[string]int{}}
	go func() {
		for ev := range w.ResultChan() {
			sts, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok {
				continue
			}
			h := sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
			tc.mu.Lock()
			if old, seen := tc.hashes[sts.Name]; seen && old != h {
				tc.counts[sts.Name]++
			}
			tc.hashes[sts.Name] = h
			tc.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return tc
}

func (tc *templateChanges) count(name string) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.counts[name]
}
