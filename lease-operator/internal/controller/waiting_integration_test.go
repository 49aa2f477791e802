//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// A lock that waits says why in an Event, once per entry into the waiting state (kubectl describe
// shows it; no Event per reconcile): no Ready pod yet (Normal), its StatefulSet missing (Warning).
func TestWaitingStatesHaveEvents(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.createLock("lock", 2) // renewed every second: many reconciles while it waits
	f.createLock("orphan", 2, func(l *leasev1.StatefulSetLock) { l.Spec.StatefulSetName = "missing"; l.Spec.LeaseName = "orphan" })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, lockEvents(t, f.ns, "lock", leasev1.ReasonNoReadyPods, corev1.EventTypeNormal), 1)
		evs := lockEvents(t, f.ns, "orphan", leasev1.ReasonStatefulSetNotFound, corev1.EventTypeWarning)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "StatefulSet missing not found")
		}
	}, wait, tick)
	// Several lease periods of reconciles in the same state: still one occurrence each.
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool {
		return occurrences(lockEvents(t, f.ns, "lock", leasev1.ReasonNoReadyPods, "")) != 1 ||
			occurrences(lockEvents(t, f.ns, "orphan", leasev1.ReasonStatefulSetNotFound, "")) != 1
	}, "an Event recorded again while the state did not change")

	// A Ready pod ends the wait; losing it is a new entry, with a new Event.
	f.createPods(1)
	f.waitWriter("db-0", "1")
	f.setReady("db-0", false)
	require.Eventually(t, func() bool {
		return occurrences(lockEvents(t, f.ns, "lock", leasev1.ReasonNoReadyPods, "")) == 2
	}, wait, tick, "a second entry into NoReadyPods")
}

// occurrences counts the times Events were recorded, including repeats folded into a series.
func occurrences(evs []eventsv1.Event) int {
	n := 0
	for _, e := range evs {
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n
}

// lockEvents returns the Events about a lock with that reason (and type, unless empty).
func lockEvents(t *testing.T, ns, name, reason, eventType string) []eventsv1.Event {
	var list eventsv1.EventList
	require.NoError(t, suite.Client.List(t.Context(), &list, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "StatefulSetLock" && e.Regarding.Name == name && e.Reason == reason && (eventType == "" || e.Type == eventType) {
			out = append(out, e)
		}
	}
	return out
}
