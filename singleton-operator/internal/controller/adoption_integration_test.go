//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// singletonEvents lists the reasons of the Events recorded about the StatefulSingleton, with their notes.
func (f *fixture) singletonEvents(name string) map[string]string {
	f.t.Helper()
	var events corev1.EventList
	require.NoError(f.t, suite.Client.List(f.t.Context(), &events, client.InNamespace(f.ns)))
	got := map[string]string{}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "StatefulSingleton" && e.InvolvedObject.Name == name {
			got[e.Reason] = e.Message
		}
	}
	return got
}

// waitEvent waits for an Event of the given reason about the StatefulSingleton and returns its note.
func (f *fixture) waitEvent(name, reason string) string {
	f.t.Helper()
	var note string
	require.Eventually(f.t, func() bool {
		var ok bool
		note, ok = f.singletonEvents(name)[reason]
		return ok
	}, wait, tick, "Event %s on StatefulSingleton %s", reason, name)
	return note
}

// One running pod without a start hold, the singleton's only pod, is adopted as the active pod; its
// successor of a newer revision stays held until the adopted pod is gone, as for a released pod.
func TestAdoptsTheOnlyPodWithoutHold(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	rs1, rs2 := f.createReplicaSet("db-1", 1), f.createReplicaSet("db-2", 2)
	f.createPod("running", ownedBy(rs1)) // created before the StatefulSingleton: no hold
	startOperator(t, nil)
	f.createSingleton("db")

	ss := f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionTrue)
	assert.Equal(t, "running", ss.Status.ActivePod)
	assert.Equal(t, "node-a", ss.Status.ActivePodNode)
	assert.Equal(t, int64(1), ss.Status.Epoch)
	assert.Contains(t, ss.Status.Message, "adopted")
	assert.Nil(t, findCondition(ss, singletonv1.ConditionUngatedPod))
	pod := f.pod("running")
	assert.Equal(t, "true", pod.Annotations[singletonv1.AnnotationAdopted])
	assert.Equal(t, "1", pod.Annotations[singletonv1.AnnotationEpoch])
	assert.Equal(t, "db", pod.Labels[singletonv1.LabelSingleton], "labelled as the webhook labels the pods it admits")
	assert.True(t, pod.DeletionTimestamp.IsZero(), "an adopted pod is not deleted")
	assert.Contains(t, f.waitEvent("db", singletonv1.ReasonAdopted), "not held")

	// A rollout: the new revision's pod is held while the adopted one runs, the operator stops the
	// adopted pod (it is the old pod of the handover) and releases the new one once it is gone.
	f.createPod("new", held(singletonv1.HoldModeWrapper), ownedBy(rs2))
	require.Eventually(t, func() bool { return !f.pod("running").DeletionTimestamp.IsZero() }, wait, tick, "adopted pod deleted for the handover")
	f.neverReleased("new", time.Second)
	f.confirmStop("running")
	f.waitReleased("new")
	assert.Equal(t, "2", f.pod("new").Annotations[singletonv1.AnnotationEpoch])
}

// A pod deletion: the replacement of the same revision is held until the adopted pod is gone.
func TestAdoptedPodDeletionHandsOver(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	startOperator(t, nil)
	f.createSingleton("db")
	f.createPod("running")
	f.waitReleased("running")
	require.Eventually(t, func() bool { return f.pod("running").Annotations[singletonv1.AnnotationAdopted] == "true" }, wait, tick)

	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("running"))) // graceful: stays until the kubelet confirms
	f.createPod("replacement", held(singletonv1.HoldModeWrapper))
	f.neverReleased("replacement", time.Second)
	ss := f.singleton("db")
	assert.Equal(t, singletonv1.ReasonWaitingForOldPod, findCondition(ss, singletonv1.ConditionReady).Reason)
	assert.Contains(t, f.waitEvent("db", singletonv1.ReasonWaitingForOldPod), "held until pods running are gone")
	f.confirmStop("running")
	f.waitReleased("replacement")
}

// Two running pods without a start hold: none is adopted, and the status and an Event say why and what
// to do. Once one is gone, the other is adopted.
func TestSeveralPodsWithoutHoldAreNotAdopted(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	f.createPod("a")
	f.createPod("b")
	startOperator(t, nil)
	f.createSingleton("db")

	ss := f.waitCondition("db", singletonv1.ConditionUngatedPod, metav1.ConditionTrue)
	assert.Equal(t, singletonv1.ReasonSeveralPodsWithoutHold, findCondition(ss, singletonv1.ConditionUngatedPod).Reason)
	ready := findCondition(ss, singletonv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, singletonv1.ReasonSeveralPodsWithoutHold, ready.Reason)
	assert.Contains(t, ready.Message, "delete all but one")
	assert.Contains(t, f.waitEvent("db", singletonv1.ReasonSeveralPodsWithoutHold), "a, b")
	testsupport.NeverWithin(t, time.Second, tick, func() bool { return f.released("a") || f.released("b") }, "nothing adopted")
	assert.True(t, f.pod("a").DeletionTimestamp.IsZero(), "no pod deleted")
	assert.True(t, f.pod("b").DeletionTimestamp.IsZero(), "no pod deleted")
	assert.Empty(t, f.singleton("db").Status.ActivePod)

	// b being deleted: a is adopted once b is gone, not before.
	require.NoError(t, suite.Client.Delete(t.Context(), f.pod("b"))) // graceful: stays until the kubelet confirms
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ss := f.singleton("db")
		if cond := findCondition(ss, singletonv1.ConditionReady); assert.NotNil(c, cond) {
			assert.Equal(c, singletonv1.ReasonWaitingToAdopt, cond.Reason)
			assert.Contains(c, cond.Message, "once pods b, being deleted, are gone")
		}
	}, wait, tick)
	f.neverReleased("a", time.Second)
	f.confirmStop("b")
	f.waitReleased("a")
	ss = f.waitCondition("db", singletonv1.ConditionReady, metav1.ConditionTrue)
	assert.Equal(t, "a", ss.Status.ActivePod)
}

// The only pod without a hold is adopted once it runs, not while it is Pending; each waiting state
// is recorded as an Event when it begins.
func TestWaitingStatesAreEvents(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createSingleton("db")
	assert.Contains(t, f.waitEvent("db", singletonv1.ReasonNoPods), "no pod")

	f.createPod("starting", onNode(""))
	f.setStarting("starting")
	ss := f.waitCondition("db", singletonv1.ConditionUngatedPod, metav1.ConditionTrue)
	assert.Equal(t, singletonv1.ReasonWaitingToAdopt, findCondition(ss, singletonv1.ConditionReady).Reason)
	assert.Contains(t, f.waitEvent("db", singletonv1.ReasonWaitingToAdopt), "once it runs")
	f.neverReleased("starting", time.Second)

	pod := f.pod("starting")
	require.NoError(t, suite.Client.SubResource("binding").Create(t.Context(), pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}))
	f.setPhase("starting", corev1.PodRunning)
	f.waitReleased("starting")
	f.waitEvent("db", singletonv1.ReasonAdopted)

	// Events are recorded on transitions, not on every reconcile.
	var events corev1.EventList
	require.NoError(t, suite.Client.List(t.Context(), &events, client.InNamespace(f.ns)))
	counts := map[string]int32{}
	for _, e := range events.Items {
		counts[e.Reason] += max(e.Count, 1)
		if e.Series != nil {
			counts[e.Reason] += e.Series.Count
		}
	}
	assert.Equal(t, int32(1), counts[singletonv1.ReasonWaitingToAdopt], "one Event per waiting state: %v", counts)
	assert.Equal(t, int32(1), counts[singletonv1.ReasonAdopted], "%v", counts)
}
