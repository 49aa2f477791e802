package controller

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
)

// FuzzAdmittedPodIsHeld checks the hand-off between the webhook and the controller: whatever pod is
// created (any labels, annotations, containers, status), once the webhook has admitted it for a
// StatefulSingleton the controller sees it as held — never as released, never as ungated — until it is
// terminal. A pod seen as released or ungated could run beside the current one.
func FuzzAdmittedPodIsHeld(f *testing.F) {
	for _, raw := range []string{
		`{"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`,
		`{"spec":{"containers":[{"name":"app","image":"x"}]}}`,
		`{"metadata":{"annotations":{"apps.statefulsingleton.com/start-granted":"1","apps.statefulsingleton.com/epoch":"1"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`,
		`{"metadata":{"annotations":{"apps.statefulsingleton.com/hold-mode":"Bogus"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`,
		`{"metadata":{"labels":{"apps.statefulsingleton.com/managed":"false"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}],"initContainers":[{"name":"i","image":"y"}]}}`,
		`{"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]},"status":{"phase":"Failed","containerStatuses":[{"name":"app","state":{"running":{}}}]}}`,
		`{"spec":{"containers":[{"name":"status-sidecar","image":"x"}]}}`,
		`{"metadata":{"deletionTimestamp":"2020-01-01T00:00:00Z","annotations":{"apps.statefulsingleton.com/exited":"app"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`,
	} {
		f.Add([]byte(raw), uint8(0))
		f.Add([]byte(raw), uint8(1))
	}
	f.Fuzz(func(t *testing.T, raw []byte, mode uint8) {
		pod := &corev1.Pod{}
		if json.Unmarshal(raw, pod) != nil {
			return
		}
		// The API server wipes a deletionTimestamp sent with a create (rest.WipeObjectMetaSystemFields),
		// so no pod is admitted being deleted (which, with the exit annotation, would count as terminal).
		pod.DeletionTimestamp = nil
		ss := &singletonv1.StatefulSingleton{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"},
			Spec: singletonv1.StatefulSingletonSpec{HoldMode: []singletonv1.HoldMode{
				singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate, ""}[mode%3]}}
		admitted := podmutation.Mutate(pod, ss, podmutation.Config{SidecarImage: "sidecar", GrantURL: "https://g/v1/grant"})
		if terminal(admitted) {
			return // Succeeded or Failed with nothing running: it can never run again
		}
		if got := classify(admitted); got != stateHeld {
			t.Fatalf("an admitted pod is seen as %v, not held (annotations %v, gates %v)", got, admitted.Annotations, admitted.Spec.SchedulingGates)
		}
		if podEpoch(admitted) != 0 {
			t.Fatalf("an admitted pod carries epoch %d", podEpoch(admitted))
		}
	})
}
