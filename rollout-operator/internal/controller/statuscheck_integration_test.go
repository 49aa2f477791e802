//go:build integration

package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// statusChecker records every status the operator writes for the PhasedRollouts of a namespace and
// every version of its StatefulSets, and when the test ends checks each status against itself and
// against the StatefulSet as it was when the status was written (the last version before the
// status's resourceVersion: one etcd orders both). Checked when the test ends, so that the order in
// which the two watches deliver does not matter.
type statusChecker struct {
	mu       sync.Mutex
	rollouts []*rolloutv1alpha1.PhasedRollout
	sts      map[string][]stsVersion // by name, in resourceVersion order
}

// stsVersion is one version of a StatefulSet; nil sts: deleted.
type stsVersion struct {
	rv  int64
	sts *appsv1.StatefulSet
}

func resourceVersion(o client.Object) int64 {
	rv, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return rv
}

func (f *fixture) checkStatuses() *statusChecker {
	ch := &statusChecker{sts: map[string][]stsVersion{}}
	sw, err := suite.Client.Watch(f.t.Context(), &appsv1.StatefulSetList{}, client.InNamespace(f.ns))
	require.NoError(f.t, err)
	pw, err := suite.Client.Watch(f.t.Context(), &rolloutv1alpha1.PhasedRolloutList{}, client.InNamespace(f.ns))
	require.NoError(f.t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range sw.ResultChan() {
			sts, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok {
				continue
			}
			v := stsVersion{rv: resourceVersion(sts), sts: sts}
			if ev.Type == watch.Deleted {
				v.sts = nil
			}
			ch.mu.Lock()
			ch.sts[sts.Name] = append(ch.sts[sts.Name], v)
			ch.mu.Unlock()
		}
	})
	wg.Go(func() {
		for ev := range pw.ResultChan() {
			pr, ok := ev.Object.(*rolloutv1alpha1.PhasedRollout)
			if !ok || ev.Type == watch.Deleted || pr.Status.ObservedGeneration == 0 {
				continue
			}
			ch.mu.Lock()
			ch.rollouts = append(ch.rollouts, pr)
			ch.mu.Unlock()
		}
	})
	f.t.Cleanup(func() {
		time.Sleep(500 * time.Millisecond) // the last events
		sw.Stop()
		pw.Stop()
		wg.Wait()
		phases := map[rolloutv1alpha1.PhasedRolloutPhase]int{}
		violations := 0
		for _, pr := range ch.rollouts {
			phases[pr.Status.Phase]++
			for _, p := range ch.problems(pr) {
				violations++
				f.t.Errorf("status contradicts itself or the cluster: %s rv %s phase %s: %s", pr.Name, pr.ResourceVersion, pr.Status.Phase, p)
			}
		}
		f.t.Logf("status checker: %d statuses checked (by phase %v), %d violations", len(ch.rollouts), phases, violations)
	})
	return ch
}

// at returns the StatefulSet name as it was just before resourceVersion rv (nil: absent).
func (ch *statusChecker) at(name string, rv int64) *appsv1.StatefulSet {
	var sts *appsv1.StatefulSet
	for _, v := range ch.sts[name] {
		if v.rv >= rv {
			break
		}
		sts = v.sts
	}
	return sts
}

func partitionOf(sts *appsv1.StatefulSet) int32 {
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return 0
}

// problems lists what in pr's status contradicts itself or its StatefulSet at that moment.
func (ch *statusChecker) problems(pr *rolloutv1alpha1.PhasedRollout) []string {
	var out []string
	st := pr.Status
	for _, c := range st.Conditions {
		if c.ObservedGeneration != st.ObservedGeneration {
			out = append(out, fmt.Sprintf("condition %s observedGeneration %d, status %d", c.Type, c.ObservedGeneration, st.ObservedGeneration))
		}
	}
	is := func(t string) bool { return meta.IsStatusConditionTrue(st.Conditions, t) }
	stalled, reconciling := is(rolloutv1alpha1.ConditionStalled), is(rolloutv1alpha1.ConditionReconciling)
	rolling := st.Phase == rolloutv1alpha1.PhaseRolling || st.Phase == rolloutv1alpha1.PhaseVerifying
	bad := st.Phase == rolloutv1alpha1.PhaseFailed || st.Phase == rolloutv1alpha1.PhaseErrorCannotManage || st.Phase == rolloutv1alpha1.PhaseErrorSTSNotFound
	switch {
	case stalled && reconciling:
		out = append(out, "Stalled and Reconciling both True")
	case !is(rolloutv1alpha1.ConditionReady) && !stalled && !reconciling:
		out = append(out, "Ready not True with neither Stalled nor Reconciling: kstatus reads Current")
	case stalled != bad:
		out = append(out, fmt.Sprintf("Stalled %v in phase %s", stalled, st.Phase))
	case reconciling != rolling:
		out = append(out, fmt.Sprintf("Reconciling %v in phase %s", reconciling, st.Phase))
	case is(rolloutv1alpha1.ConditionUpdated) != (st.Phase == rolloutv1alpha1.PhaseUpdated):
		out = append(out, fmt.Sprintf("condition Updated %v in phase %s", is(rolloutv1alpha1.ConditionUpdated), st.Phase))
	}
	if s := st.RollingPodStatus; s != nil {
		if s.ConsecutiveSuccessfulChecks > s.TotalChecks || s.TotalFailedChecks > s.TotalChecks || s.ConsecutiveFailedChecks > s.TotalFailedChecks {
			out = append(out, fmt.Sprintf("step counters: %+v", *s))
		}
		if !rolling && st.Phase != rolloutv1alpha1.PhaseFailed {
			out = append(out, "a step in phase "+string(st.Phase))
		}
	} else if rolling {
		out = append(out, "no step while rolling")
	}

	sts := ch.at(pr.Spec.TargetRef, resourceVersion(pr))
	if sts == nil {
		if st.Phase != rolloutv1alpha1.PhaseErrorSTSNotFound {
			out = append(out, "StatefulSet absent in phase "+string(st.Phase))
		}
		return out
	}
	partition, replicas := partitionOf(sts), ptr.Deref(sts.Spec.Replicas, 1)
	if st.Phase == rolloutv1alpha1.PhaseErrorSTSNotFound {
		out = append(out, "ErrorSTSNotFound while the StatefulSet exists")
	}
	if st.Replicas != nil && *st.Replicas != replicas {
		out = append(out, fmt.Sprintf("status.replicas %d, StatefulSet %d", *st.Replicas, replicas))
	}
	stepAt := func() int32 {
		if st.RollingPodStatus == nil || st.RollingPodStatus.Partition == nil {
			return -1
		}
		return *st.RollingPodStatus.Partition
	}
	switch st.Phase {
	case rolloutv1alpha1.PhaseRolling:
		// Pods below the partition run the current revision, so the StatefulSet has two.
		if sts.Status.UpdateRevision == sts.Status.CurrentRevision || st.UpdateRevision != sts.Status.UpdateRevision {
			out = append(out, fmt.Sprintf("Rolling to %s, StatefulSet current %s update %s", st.UpdateRevision, sts.Status.CurrentRevision, sts.Status.UpdateRevision))
		}
		if partition == 0 || partition != stepAt() || partition > replicas {
			out = append(out, fmt.Sprintf("Rolling, step at partition %d, StatefulSet partition %d of %d", stepAt(), partition, replicas))
		}
	case rolloutv1alpha1.PhaseVerifying:
		if partition != 0 || stepAt() != 0 || st.UpdateRevision != sts.Status.UpdateRevision {
			out = append(out, fmt.Sprintf("Verifying %s, step at %d, StatefulSet partition %d update %s", st.UpdateRevision, stepAt(), partition, sts.Status.UpdateRevision))
		}
	case rolloutv1alpha1.PhaseUpdated:
		if st.UpdateRevision != sts.Status.UpdateRevision || (partition != 0 && partition != replicas) {
			out = append(out, fmt.Sprintf("Updated %s, StatefulSet partition %d of %d update %s", st.UpdateRevision, partition, replicas, sts.Status.UpdateRevision))
		}
	case rolloutv1alpha1.PhaseFailed:
		if partition != stepAt() {
			out = append(out, fmt.Sprintf("Failed at partition %d, StatefulSet partition %d", stepAt(), partition))
		}
	case rolloutv1alpha1.PhaseSuspended:
		if partition != 0 {
			out = append(out, fmt.Sprintf("Suspended, StatefulSet partition %d", partition))
		}
	}
	if rolling || st.Phase == rolloutv1alpha1.PhaseUpdated || st.Phase == rolloutv1alpha1.PhaseSuspended || st.Phase == rolloutv1alpha1.PhaseFailed {
		if owner := sts.Annotations[rolloutv1alpha1.ManagedByAnnotation]; owner != pr.Name {
			out = append(out, fmt.Sprintf("phase %s, StatefulSet managed by %q", st.Phase, owner))
		}
	}
	return out
}

// TestStatusNeverContradictsItself drives a PhasedRollout through its states (idle, rolling,
// verifying, a rollout completed, failed after maxTries, retried, suspended, idle again, deleted) and
// another one whose StatefulSet is missing, while statusChecker checks every status written against
// the StatefulSet at that moment, and kstatus reads each state as expected.
func TestStatusNeverContradictsItself(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	f := newFixture(t, 3, 0)
	ch := f.checkStatuses()
	startOperator(t, checker)
	f.simulateStatefulSetController()
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](2) })
	f.createRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Name, pr.Spec.TargetRef = "lost", "missing" })
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	assert.Equal(t, status.CurrentStatus, f.kstatusOf())
	f.waitPartition(3)

	f.newRevision("web-r2")
	f.waitPhase(rolloutv1alpha1.PhaseRolling)
	assert.Equal(t, status.InProgressStatus, f.kstatusOf())
	f.waitPhase(rolloutv1alpha1.PhaseVerifying)
	f.waitRolledTo("web-r2")
	f.waitPartition(3)

	checker.set(VerdictFail)
	f.newRevision("web-r3")
	f.waitPhase(rolloutv1alpha1.PhaseFailed)
	assert.Equal(t, status.FailedStatus, f.kstatusOf())
	checker.set(VerdictPass)
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Check.MaxTries = ptr.To[int32](5) })
	f.waitRolledTo("web-r3")

	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.SkipCheck = ptr.To(true) })
	f.waitPhase(rolloutv1alpha1.PhaseSuspended)
	f.waitPartition(0)
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.SkipCheck = ptr.To(false) })
	f.waitPhase(rolloutv1alpha1.PhaseUpdated)
	f.waitPartition(3)

	lost := &rolloutv1alpha1.PhasedRollout{}
	require.NoError(t, suite.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "lost"}, lost))
	assert.Equal(t, rolloutv1alpha1.PhaseErrorSTSNotFound, lost.Status.Phase)

	require.NoError(t, suite.Client.Delete(context.Background(), f.rollout()))
	f.waitHandedBack(0)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	seen := map[rolloutv1alpha1.PhasedRolloutPhase]bool{}
	for _, pr := range ch.rollouts {
		seen[pr.Status.Phase] = true
	}
	for _, p := range []rolloutv1alpha1.PhasedRolloutPhase{rolloutv1alpha1.PhaseUpdated, rolloutv1alpha1.PhaseRolling, rolloutv1alpha1.PhaseVerifying,
		rolloutv1alpha1.PhaseFailed, rolloutv1alpha1.PhaseSuspended, rolloutv1alpha1.PhaseErrorSTSNotFound} {
		assert.True(t, seen[p], "a status in phase %s was checked", p)
	}
	assert.Greater(t, len(ch.rollouts), 10, "statuses checked")
}
