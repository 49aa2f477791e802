//go:build integration

package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"

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
		assert.Len(c, typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "lock", leasev1.ReasonNoReadyPods), corev1.EventTypeNormal), 1)
		evs := typed(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "orphan", leasev1.ReasonStatefulSetNotFound), corev1.EventTypeWarning)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "StatefulSet missing not found")
		}
	}, wait, tick)
	// Several lease periods of reconciles in the same state: still one occurrence each.
	staysOneEvent(t, f.ns, map[string]string{"lock": leasev1.ReasonNoReadyPods, "orphan": leasev1.ReasonStatefulSetNotFound})

	// A Ready pod ends the wait; losing it is a new entry, with a new Event.
	f.createPods(1)
	f.waitWriter("db-0", "1")
	f.setReady("db-0", false)
	require.Eventually(t, func() bool {
		return testsupport.Occurrences(testsupport.Events(t, suite.Client, f.ns, "StatefulSetLock", "lock", leasev1.ReasonNoReadyPods)) == 2
	}, wait, tick, "a second entry into NoReadyPods")
}

// typed keeps the Events of one type.
func typed(evs []eventsv1.Event, eventType string) []eventsv1.Event {
	var out []eventsv1.Event
	for _, e := range evs {
		if e.Type == eventType {
			out = append(out, e)
		}
	}
	return out
}

// staysOneEvent asserts that, for 3 seconds of reconciles in an unchanged state, each lock (name →
// reason of its waiting Event) keeps exactly one occurrence of its Event.
func staysOneEvent(t *testing.T, ns string, reasons map[string]string) {
	t.Helper()
	testsupport.NeverWithin(t, 3*time.Second, 100*time.Millisecond, func() bool {
		for name, reason := range reasons {
			if testsupport.Occurrences(testsupport.Events(t, suite.Client, ns, "StatefulSetLock", name, reason)) != 1 {
				return true
			}
		}
		return false
	}, "an Event recorded again while the state did not change")
}
