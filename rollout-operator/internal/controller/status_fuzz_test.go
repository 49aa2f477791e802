package controller

import (
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// conditionReason is metav1.Condition's reason pattern (the API server refuses any other).
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// FuzzSetConditions checks the conditions derived from any phase (the enum and "" of a new object),
// message and last error: six well-formed conditions (a valid reason, status True or False, the
// object's generation), Ready and Degraded never both True, Progressing only while rolling or verifying,
// kstatus' Stalled with Degraded and Reconciling with Progressing, and deriving them twice changes nothing.
func FuzzSetConditions(f *testing.F) {
	f.Add(uint8(0), "rolling StatefulSet web to revision web-2: partition 1", "", int64(3))
	f.Add(uint8(4), "step at partition 1 used up maxTries=3", "Prometheus at http://p unreachable", int64(1))
	f.Add(uint8(8), "", "", int64(0))
	// "Ready" is the idle phase earlier versions stored (now Updated, the original project's value).
	phases := []rolloutv1alpha1.PhasedRolloutPhase{"Ready", rolloutv1alpha1.PhaseRolling,
		rolloutv1alpha1.PhaseVerifying, rolloutv1alpha1.PhaseUpdated, rolloutv1alpha1.PhaseFailed,
		rolloutv1alpha1.PhaseSuspended, rolloutv1alpha1.PhaseErrorCannotManage, rolloutv1alpha1.PhaseErrorSTSNotFound, ""}
	f.Fuzz(func(t *testing.T, phase uint8, message, lastError string, generation int64) {
		pr := &rolloutv1alpha1.PhasedRollout{}
		pr.Generation = generation
		pr.Status.Phase = phases[int(phase)%len(phases)]
		pr.Status.Message, pr.Status.LastError = message, lastError
		setConditions(pr)
		once := slices.Clone(pr.Status.Conditions)
		setConditions(pr)
		if !slices.EqualFunc(once, pr.Status.Conditions, func(a, b metav1.Condition) bool {
			return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
				a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(&b.LastTransitionTime)
		}) {
			t.Fatalf("setConditions is not idempotent: %+v then %+v", once, pr.Status.Conditions)
		}
		status := map[string]metav1.ConditionStatus{}
		for _, c := range pr.Status.Conditions {
			if !conditionReason.MatchString(c.Reason) || len(c.Reason) > 1024 {
				t.Fatalf("condition %s has reason %q", c.Type, c.Reason)
			}
			if c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse {
				t.Fatalf("condition %s has status %q", c.Type, c.Status)
			}
			if c.ObservedGeneration != generation || c.LastTransitionTime.IsZero() {
				t.Fatalf("condition %s: generation %d, transition %v", c.Type, c.ObservedGeneration, c.LastTransitionTime)
			}
			status[c.Type] = c.Status
		}
		if len(status) != 6 {
			t.Fatalf("conditions %v", status)
		}
		if status[rolloutv1alpha1.ConditionReady] == metav1.ConditionTrue && status[rolloutv1alpha1.ConditionDegraded] == metav1.ConditionTrue {
			t.Fatal("Ready and Degraded both True")
		}
		rolling := pr.Status.Phase == rolloutv1alpha1.PhaseRolling || pr.Status.Phase == rolloutv1alpha1.PhaseVerifying
		if (status[rolloutv1alpha1.ConditionProgressing] == metav1.ConditionTrue) != rolling {
			t.Fatalf("Progressing %s in phase %q", status[rolloutv1alpha1.ConditionProgressing], pr.Status.Phase)
		}
		// kstatus: Stalled exactly when Degraded, Reconciling exactly when Progressing, never both.
		if status[rolloutv1alpha1.ConditionStalled] != status[rolloutv1alpha1.ConditionDegraded] || status[rolloutv1alpha1.ConditionReconciling] != status[rolloutv1alpha1.ConditionProgressing] {
			t.Fatalf("Stalled %s / Degraded %s, Reconciling %s / Progressing %s", status[rolloutv1alpha1.ConditionStalled], status[rolloutv1alpha1.ConditionDegraded], status[rolloutv1alpha1.ConditionReconciling], status[rolloutv1alpha1.ConditionProgressing])
		}
		if status[rolloutv1alpha1.ConditionStalled] == metav1.ConditionTrue && status[rolloutv1alpha1.ConditionReconciling] == metav1.ConditionTrue {
			t.Fatal("Stalled and Reconciling both True")
		}
	})
}
