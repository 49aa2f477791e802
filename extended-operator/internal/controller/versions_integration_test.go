//go:build integration

package controller

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// startLaggingOperator runs the controller with a cache that shows every change of an
// ExtendedStatefulSet of namespace ns lag late (as a busy API server's watch may), while StatefulSets
// arrive at once: the operator's reconcile then often starts from a copy older than its own last status
// write.
func startLaggingOperator(t *testing.T, ns string, lag time.Duration) {
	t.Helper()
	opts := Options{ConfigQuietPeriod: 500 * time.Millisecond, ConfigMaxDelay: 5 * time.Second}
	suite.StartManager(t, opts.Setup, func(o *ctrl.Options) {
		CacheOptions(&o.Cache) // as main.go does
		o.Cache.ByObject[&extendedv1alpha1.ExtendedStatefulSet{}] = cache.ByObject{Transform: func(obj any) (any, error) {
			if o, ok := obj.(client.Object); ok && o.GetNamespace() == ns {
				time.Sleep(lag)
			}
			return obj, nil
		}}
	})
}

// statusChecker watches one ExtendedStatefulSet through the API server and records every status that
// contradicts itself: Ready=True (one version runs with all its pods Ready, no upgrade under way) while
// a version of the versions map is not running, or while the serving version is not in it.
type statusChecker struct {
	mu         sync.Mutex
	seen       int
	violations []string
}

func checkStatuses(t *testing.T, f *fixture) *statusChecker {
	t.Helper()
	w, err := suite.Client.Watch(t.Context(), &extendedv1alpha1.ExtendedStatefulSetList{}, client.InNamespace(f.ns))
	require.NoError(t, err)
	sc := &statusChecker{}
	go func() {
		for ev := range w.ResultChan() {
			ests, ok := ev.Object.(*extendedv1alpha1.ExtendedStatefulSet)
			if !ok || ests.Name != f.name {
				continue
			}
			sc.check(ests)
		}
	}()
	t.Cleanup(w.Stop)
	return sc
}

func (sc *statusChecker) check(ests *extendedv1alpha1.ExtendedStatefulSet) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.seen++
	ready := meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue {
		return
	}
	st := ests.Status
	running, ok := st.Versions[fmt.Sprint(st.CurrentVersion)]
	for _, r := range st.Versions {
		running = running && r
	}
	if !ok || !running {
		sc.violations = append(sc.violations, fmt.Sprintf("rv %s: Ready=True (%q) but versions=%v, currentVersion %d",
			ests.ResourceVersion, ready.Message, st.Versions, st.CurrentVersion))
	}
}

func (sc *statusChecker) result() (seen int, violations []string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.seen, append([]string(nil), sc.violations...)
}

// restartPod plays the StatefulSet controller rolling the only pod of version 1 after its template
// changed: the pod is gone (ready 0, none updated), then back and Ready on the new template.
func (f *fixture) restartPod(ready int32) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := f.sts(1)
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: 1, ReadyReplicas: ready, AvailableReplicas: ready,
			CurrentReplicas: ready, UpdatedReplicas: ready, CurrentRevision: "r2", UpdateRevision: "r2",
		}
		if ready == 0 {
			sts.Status.CurrentRevision = "r1"
		}
		return suite.Client.Status().Update(f.t.Context(), sts)
	}))
}

// After a ConfigMap change restarts the pod of an ExtendedStatefulSet, status.versions says version 1 is
// not running while its pod is gone and running again within seconds of the pod being Ready, and no
// status ever says Ready=True beside a version that does not run: both are computed from the same
// observation and written against the object as last written, even while the operator's cache of
// ExtendedStatefulSets lags behind its own status writes (issue 16, item 8: {"1": false} for 60 s and
// more beside "version 1 runs with all 1 pods Ready").
func TestVersionsFollowTheRestartedPod(t *testing.T) {
	f := newFixture(t)
	startLaggingOperator(t, f.ns, 300*time.Millisecond)
	require.NoError(t, suite.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: f.ns}, Data: map[string]string{"k": "0"}}))
	ests := f.newESTS(1, "app:1")
	ests.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	checker := checkStatuses(t, f)
	f.create(ests)
	f.waitSTS(1, func(*assert.CollectT, *appsv1.StatefulSet) {}, "version 1")
	f.setStatus(1, 1)
	f.waitVersions(map[string]bool{"1": true}, 5*time.Second)

	for i := 1; i <= 3; i++ {
		hash := f.sts(1).Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
		patchConfigMap(t, f.ns, "conf", func(cm *corev1.ConfigMap) { cm.Data["k"] = fmt.Sprint(i) })
		f.waitSTS(1, func(c *assert.CollectT, sts *appsv1.StatefulSet) {
			assert.NotEqual(c, hash, sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation])
		}, "the pods roll for the new data")
		f.restartPod(0)
		f.waitVersions(map[string]bool{"1": false}, 5*time.Second)
		// At once, while the operator's cache still shows the status before its last write.
		f.restartPod(1)
		f.waitVersions(map[string]bool{"1": true}, 3*time.Second)
		f.waitCondition(extendedv1alpha1.ConditionReady, metav1.ConditionTrue, "")
		// And it stays so (nothing left for a later write to put right).
		time.Sleep(time.Second)
		assert.Equal(t, map[string]bool{"1": true}, f.get().Status.Versions, "round %d", i)
	}
	seen, violations := checker.result()
	assert.Positive(t, seen)
	assert.Empty(t, violations, "statuses contradicting themselves")
	ready := meta.FindStatusCondition(f.get().Status.Conditions, extendedv1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, "version 1 runs with all 1 pods Ready", ready.Message)
}

// waitVersions waits until status.versions is want, for at most d.
func (f *fixture) waitVersions(want map[string]bool, d time.Duration) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		assert.Equal(c, want, f.get().Status.Versions)
	}, d, tick, "status.versions %v", want)
}
