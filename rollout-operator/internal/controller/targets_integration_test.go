//go:build integration

package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// zones is a namespace with one StatefulSet per zone, each with its pods, played by zoneController.
type zones struct {
	t        *testing.T
	ns       string
	names    []string
	replicas int32

	mu       sync.Mutex
	notReady map[string]bool // pods held not Ready by the test
	// violations are the moments two StatefulSets had pods released at once, or one started before
	// an earlier one was done.
	violations []string
	started    []string // the StatefulSets in the order their partition first went below replicas for a new revision
}

func newZones(t *testing.T, replicas int32, names ...string) *zones {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-targets-"}}
	require.NoError(t, suite.Client.Create(t.Context(), ns))
	z := &zones{t: t, ns: ns.Name, names: names, replicas: replicas, notReady: map[string]bool{}}
	for _, name := range names {
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: z.ns},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
				},
			},
		}
		require.NoError(t, suite.Client.Create(t.Context(), sts))
		for i := range replicas {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("%s-%d", name, i), Namespace: z.ns,
					Labels:          map[string]string{"app": name, appsv1.ControllerRevisionHashLabelKey: name + "-r1"},
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
			require.NoError(t, suite.Client.Create(t.Context(), pod))
			setPodReady(t.Context(), pod, true)
		}
		z.setUpdateRevision(name, name+"-r1")
	}
	return z
}

// setUpdateRevision plays a template change of StatefulSet name: its update revision becomes rev.
func (z *zones) setUpdateRevision(name, rev string) {
	z.t.Helper()
	require.NoError(z.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := z.sts(name)
		if sts.Status.CurrentRevision == "" {
			sts.Status.CurrentRevision = rev
		}
		sts.Status.UpdateRevision = rev
		sts.Status.ObservedGeneration = sts.Generation
		return suite.Client.Status().Update(context.Background(), sts)
	}))
}

func (z *zones) sts(name string) *appsv1.StatefulSet {
	z.t.Helper()
	sts := &appsv1.StatefulSet{}
	require.NoError(z.t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: z.ns, Name: name}, sts))
	return sts
}

// hold keeps pod not Ready (or lets it be Ready again) whatever its revision.
func (z *zones) hold(pod string, notReady bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.notReady[pod] = notReady
}

// run plays the StatefulSet controller of every zone until the test ends: pods at or above the
// partition move to the update revision (Ready at once unless held), the status follows, and the
// order of the zones' rollouts is checked at every tick.
func (z *zones) run() {
	ctx := z.t.Context()
	go func() {
		seen := map[string]bool{}
		for ctx.Err() == nil {
			time.Sleep(tick)
			for _, name := range z.names {
				sts := &appsv1.StatefulSet{}
				if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: z.ns, Name: name}, sts); err == nil {
					z.step(ctx, sts)
				}
			}
			// The order is judged on the StatefulSets as they are after this pass.
			all := make([]*appsv1.StatefulSet, 0, len(z.names))
			for _, name := range z.names {
				sts := &appsv1.StatefulSet{}
				if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: z.ns, Name: name}, sts); err == nil {
					all = append(all, sts)
				}
			}
			z.checkOrder(all, seen)
		}
	}()
}

// step plays one pass of the StatefulSet controller on sts.
func (z *zones) step(ctx context.Context, sts *appsv1.StatefulSet) {
	p := int32(0)
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		p = *ru.Partition
	}
	var updated, ready int32
	for i := range z.replicas {
		pod := &corev1.Pod{}
		if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: z.ns, Name: fmt.Sprintf("%s-%d", sts.Name, i)}, pod); err != nil {
			return
		}
		if i >= p && pod.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
			orig := pod.DeepCopy()
			pod.Labels[appsv1.ControllerRevisionHashLabelKey] = sts.Status.UpdateRevision
			if suite.Client.Patch(ctx, pod, client.MergeFrom(orig)) != nil {
				return
			}
		}
		z.mu.Lock()
		want := !z.notReady[pod.Name]
		z.mu.Unlock()
		if podReady(pod) != want {
			setPodReady(ctx, pod, want)
		}
		if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
			updated++
		}
		if want {
			ready++
		}
	}
	st := sts.Status
	st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas = sts.Generation, z.replicas, updated, ready, ready
	if updated == z.replicas {
		st.CurrentRevision = st.UpdateRevision
	}
	if !equality.Semantic.DeepEqual(st, sts.Status) {
		sts.Status = st
		_ = suite.Client.Status().Update(ctx, sts)
	}
}

// checkOrder records a violation when two StatefulSets have pods released for a new revision at once
// (partition below replicas, update revision not yet current), or when one starts (is released) while
// one before it in the list is not done; and the order in which they started.
func (z *zones) checkOrder(all []*appsv1.StatefulSet, seen map[string]bool) {
	if len(all) != len(z.names) {
		return
	}
	var now []string
	for i, sts := range all {
		rolling := releasing(sts) && sts.Status.CurrentRevision != sts.Status.UpdateRevision
		if !rolling {
			seen[sts.Name] = false
			continue
		}
		now = append(now, sts.Name)
		if !seen[sts.Name] {
			for _, before := range all[:i] {
				if !targetDone(before) {
					z.addViolation(fmt.Sprintf("%s started while %s is not done (%+v)", sts.Name, before.Name, before.Status))
				}
			}
			seen[sts.Name] = true
			z.mu.Lock()
			z.started = append(z.started, sts.Name)
			z.mu.Unlock()
		}
	}
	if len(now) > 1 {
		z.addViolation(fmt.Sprintf("released at once: %v", now))
	}
}

func (z *zones) addViolation(v string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.violations = append(z.violations, v)
}

func (z *zones) report() (started, violations []string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.started), slices.Clone(z.violations)
}

// createRollout creates the PhasedRollout "zones" over every zone, in order, with a fast check.
func (z *zones) createRollout() {
	z.t.Helper()
	require.NoError(z.t, suite.Client.Create(z.t.Context(), &rolloutv1alpha1.PhasedRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "zones", Namespace: z.ns},
		Spec: rolloutv1alpha1.PhasedRolloutSpec{
			TargetRefs: z.names,
			Check: rolloutv1alpha1.Check{
				InitialDelaySeconds: ptr.To[int32](0), PeriodSeconds: 1, SuccessThreshold: 1,
				Query: &rolloutv1alpha1.PrometheusQuery{Expr: `errors{pod="{{pod}}"} > 0`, URL: "prom:9090"},
			},
		},
	}))
}

func (z *zones) rollout() *rolloutv1alpha1.PhasedRollout {
	z.t.Helper()
	pr := &rolloutv1alpha1.PhasedRollout{}
	require.NoError(z.t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: z.ns, Name: "zones"}, pr))
	return pr
}

// waitAllUpdated waits until every zone runs rev+suffix (name-<rev>) and the PhasedRollout is idle.
func (z *zones) waitAllUpdated(rev string) *rolloutv1alpha1.PhasedRollout {
	z.t.Helper()
	var pr *rolloutv1alpha1.PhasedRollout
	require.Eventually(z.t, func() bool {
		pr = z.rollout()
		if pr.Status.Phase != rolloutv1alpha1.PhaseUpdated || len(pr.Status.Targets) != len(z.names) {
			return false
		}
		for i, t := range pr.Status.Targets {
			if t.State != rolloutv1alpha1.TargetUpdated || t.UpdateRevision != z.names[i]+"-"+rev || t.CurrentRevision != t.UpdateRevision {
				return false
			}
		}
		return true
	}, wait, tick, "every zone updated to %s", rev)
	return pr
}

// TestTargetRefsRollZoneByZone: a PhasedRollout with targetRefs [zone-a, zone-b, zone-c] rolls a new
// revision of all three in list order, one StatefulSet at a time, each one's steps checked, and holds
// the others at partition = replicas meanwhile; a StatefulSet that is not Ready holds back the ones
// after it (Event WaitForTarget) until it is Ready again.
func TestTargetRefsRollZoneByZone(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	defer startOperator(t, checker)()
	z := newZones(t, 2, "zone-a", "zone-b", "zone-c")
	z.run()
	z.createRollout()
	pr := z.waitAllUpdated("r1")
	for _, name := range z.names {
		sts := z.sts(name)
		assert.Equal(t, int32(2), *sts.Spec.UpdateStrategy.RollingUpdate.Partition, "%s held at replicas while idle", name)
		assert.Equal(t, "zones", sts.Annotations[rolloutv1alpha1.ManagedByAnnotation])
	}
	assert.Equal(t, "True", string(condStatus(pr, rolloutv1alpha1.ConditionAvailable)))

	// A new revision of all three at once (one commit changing every zone's template).
	for _, name := range slices.Backward(z.names) {
		z.setUpdateRevision(name, name+"-r2")
	}
	pr = z.waitAllUpdated("r2")
	started, violations := z.report()
	assert.Empty(t, violations, "never two zones rolling at once, never one before the earlier ones are done")
	assert.Equal(t, z.names, started, "the zones started in spec.targetRefs order")
	checked := checkedPods(checker)
	for _, name := range z.names {
		for i := range 2 {
			assert.Positive(t, checked[podQuery(fmt.Sprintf("%s-%d", name, i))], "pod %s-%d was checked", name, i)
		}
	}
	assert.Contains(t, reasonsOf(t, z.ns, "zones"), rolloutv1alpha1.EventTargetStarted)

	// zone-a loses a pod's readiness; zone-b gets a new revision: it waits for zone-a.
	z.hold("zone-a-1", true)
	require.Eventually(t, func() bool { return z.sts("zone-a").Status.ReadyReplicas == 1 }, wait, tick)
	z.setUpdateRevision("zone-b", "zone-b-r3")
	require.Eventually(t, func() bool {
		pr = z.rollout()
		return pr.Status.Phase == rolloutv1alpha1.PhaseRolling && pr.Status.Targets[0].State == rolloutv1alpha1.TargetNotReady &&
			pr.Status.Targets[1].State == rolloutv1alpha1.TargetWaiting
	}, wait, tick, "zone-b waits for zone-a")
	assert.Contains(t, pr.Status.Message, "waiting for StatefulSet zone-a to be Ready")
	assert.Contains(t, reasonsOf(t, z.ns, "zones"), rolloutv1alpha1.EventWaitForTarget)
	assert.Equal(t, "True", string(condStatus(pr, rolloutv1alpha1.ConditionReconciling)), "kstatus: in progress while a zone waits")
	time.Sleep(time.Second) // several reconciles: zone-b must stay held
	assert.Equal(t, int32(2), *z.sts("zone-b").Spec.UpdateStrategy.RollingUpdate.Partition, "zone-b held while zone-a is not Ready")
	z.hold("zone-a-1", false)
	require.Eventually(t, func() bool {
		pr = z.rollout()
		return pr.Status.Phase == rolloutv1alpha1.PhaseUpdated && pr.Status.Targets[1].CurrentRevision == "zone-b-r3" &&
			pr.Status.Targets[1].State == rolloutv1alpha1.TargetUpdated
	}, wait, tick, "zone-b rolled once zone-a was Ready")
	_, violations = z.report()
	assert.Empty(t, violations)
}

// TestTargetRefsRolloutUnderWayFinishesFirst: a StatefulSet whose rollout released pods finishes
// before an earlier one that changed meanwhile starts, even while it waits for a pod to be Ready.
func TestTargetRefsRolloutUnderWayFinishesFirst(t *testing.T) {
	defer startOperator(t, newFakeChecker(VerdictPass))()
	z := newZones(t, 3, "zone-a", "zone-b")
	z.run()
	z.createRollout()
	z.waitAllUpdated("r1")
	z.setUpdateRevision("zone-b", "zone-b-r2")
	require.Eventually(t, func() bool {
		started, _ := z.report()
		return slices.Contains(started, "zone-b")
	}, wait, tick, "zone-b releases its first pod (as the StatefulSet controller saw it)")
	z.hold("zone-b-1", true) // zone-b's rollout stops before its end, waiting for zone-b-1 to be Ready
	require.Eventually(t, func() bool {
		pr := z.rollout()
		st := pr.Status.RollingPodStatus
		return pr.Status.ActiveTarget == "zone-b" && st != nil && (st.Status == rolloutv1alpha1.StepWaitForPodToBeUpdated || st.Status == rolloutv1alpha1.StepWaitForAllPodsToBeAvailable)
	}, wait, tick, "zone-b's rollout waits for zone-b-1")
	z.setUpdateRevision("zone-a", "zone-a-r2")
	time.Sleep(time.Second) // several reconciles: zone-a must stay held
	pr := z.rollout()
	assert.Equal(t, "zone-b", pr.Status.ActiveTarget, "zone-b's rollout released pods: it stays active")
	assert.Equal(t, int32(3), *z.sts("zone-a").Spec.UpdateStrategy.RollingUpdate.Partition, "zone-a held while zone-b's rollout is under way")
	assert.Equal(t, rolloutv1alpha1.TargetWaiting, pr.Status.Targets[0].State)
	z.hold("zone-b-1", false)
	z.waitAllUpdated("r2")
	started, violations := z.report()
	assert.Empty(t, violations)
	assert.Equal(t, []string{"zone-b", "zone-a"}, started, "the rollout under way (zone-b) finished before zone-a started")
}

// TestTargetRefsMissingStatefulSetIsReported: a PhasedRollout naming a StatefulSet that does not exist
// reports it (phase ErrorSTSNotFound, Stalled, the target NotFound) and holds nothing.
func TestTargetRefsMissingStatefulSetIsReported(t *testing.T) {
	defer startOperator(t, newFakeChecker(VerdictPass))()
	z := newZones(t, 1, "zone-a")
	z.run()
	require.NoError(t, suite.Client.Create(t.Context(), &rolloutv1alpha1.PhasedRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "zones", Namespace: z.ns},
		Spec: rolloutv1alpha1.PhasedRolloutSpec{
			TargetRefs: []string{"zone-a", "zone-x"},
			Check:      rolloutv1alpha1.Check{Query: &rolloutv1alpha1.PrometheusQuery{Expr: `up == 0`, URL: "prom:9090"}},
		},
	}))
	require.Eventually(t, func() bool {
		pr := z.rollout()
		return pr.Status.Phase == rolloutv1alpha1.PhaseErrorSTSNotFound && condStatus(pr, rolloutv1alpha1.ConditionStalled) == metav1.ConditionTrue &&
			len(pr.Status.Targets) == 2 && pr.Status.Targets[1].State == rolloutv1alpha1.TargetNotFound
	}, wait, tick)
	assert.Contains(t, z.rollout().Status.Message, "zone-x")
	sts := z.sts("zone-a")
	assert.Equal(t, int32(0), *sts.Spec.UpdateStrategy.RollingUpdate.Partition, "nothing is held until every StatefulSet exists (the API server's default partition)")
	assert.NotContains(t, sts.Annotations, rolloutv1alpha1.ManagedByAnnotation)
}

func condStatus(pr *rolloutv1alpha1.PhasedRollout, t string) metav1.ConditionStatus {
	for _, c := range pr.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func reasonsOf(t *testing.T, ns, name string) []string {
	t.Helper()
	f := &fixture{t: t, ns: ns}
	return f.eventReasons(name)
}
