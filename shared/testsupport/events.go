package testsupport

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Events returns the events.k8s.io Events of a namespace about the object of that kind and name with
// that reason.
func Events(t *testing.T, c client.Reader, ns, kind, name, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// Occurrences counts the times Events were recorded, including the repeats a recorder folds into a
// series (an Event recorded again about the same object version becomes a series of the first).
func Occurrences(evs []eventsv1.Event) int {
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
