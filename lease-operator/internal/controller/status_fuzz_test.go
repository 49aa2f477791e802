package controller

import (
	"regexp"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// conditionReason is metav1.Condition's reason pattern (the API server refuses any other).
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// FuzzLockStatus applies a sequence of reconcile outcomes (3 bytes each: the state, the writer, the
// flags known and failover) to one StatefulSetLock and checks the status after each: well-formed
// conditions of the object's generation; Ready only with a writer and Available; Available and Error
// never both True; a condition's lastTransitionTime moves only when its status changes; and the last
// failover is the last one reported.
func FuzzLockStatus(f *testing.F) {
	f.Add([]byte{0, 1, 3, 1, 0, 1, 2, 2, 3}, int64(4))
	f.Add([]byte{6, 0, 0, 0, 1, 3, 5, 0, 1}, int64(1))
	f.Add([]byte{7, 1, 1, 0, 1, 1, 7, 0, 1}, int64(0))
	states := []string{leasev1.ReasonAvailable, leasev1.ReasonFailoverDelayed, leasev1.ReasonNoReadyPods,
		leasev1.ReasonStatefulSetNotFound, leasev1.ReasonLeaseConflict, leasev1.ReasonStatefulSetConflict,
		leasev1.ReasonReconcileError, leasev1.ReasonReconciling}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, steps []byte, generation int64) {
		lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Generation: generation}}
		lastFailover := ""
		for i := 0; i+3 <= len(steps) && i < 60; i += 3 {
			o := &scope{lock: lock, state: states[int(steps[i])%len(states)], known: steps[i+2]&1 != 0, transitions: int32(i)}
			if o.state == leasev1.ReasonAvailable || o.state == leasev1.ReasonFailoverDelayed {
				o.known = true // these states are the outcome of an election
			}
			if steps[i+1]%3 != 0 {
				o.writer = Holder{Name: "db-" + string(rune('0'+steps[i+1]%3)), UID: types.UID("u")}
			}
			if steps[i+2]&2 != 0 {
				o.failoverReason, o.failoverTime = leasev1.FailoverReasonWriterGone, t0.Add(time.Duration(i)*time.Second)
				lastFailover = o.failoverReason
			}
			before := map[string]metav1.Condition{}
			for _, c := range lock.Status.Conditions {
				before[c.Type] = c
			}
			applyStatus(o)

			status := map[string]metav1.ConditionStatus{}
			for _, c := range lock.Status.Conditions {
				if !conditionReason.MatchString(c.Reason) || c.Message == "" || c.ObservedGeneration != generation {
					t.Fatalf("condition %+v", c)
				}
				if c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse {
					t.Fatalf("condition %s status %q", c.Type, c.Status)
				}
				if prev, ok := before[c.Type]; ok && prev.Status == c.Status && !prev.LastTransitionTime.Equal(&c.LastTransitionTime) {
					t.Fatalf("condition %s moved its transition time without a status change", c.Type)
				}
				status[c.Type] = c.Status
			}
			if status[leasev1.ConditionReady] == metav1.ConditionTrue &&
				(lock.Status.WriterPod == "" || status[leasev1.ConditionAvailable] != metav1.ConditionTrue) {
				t.Fatalf("Ready without a writer or not Available: %+v", lock.Status)
			}
			if status[leasev1.ConditionAvailable] == metav1.ConditionTrue && status[leasev1.ConditionError] == metav1.ConditionTrue &&
				o.state != leasev1.ReasonReconcileError {
				t.Fatalf("Available and Error both True in state %s", o.state)
			}
			if lock.Status.LastFailoverReason != lastFailover || lock.Status.ObservedGeneration != generation {
				t.Fatalf("last failover %q, want %q", lock.Status.LastFailoverReason, lastFailover)
			}
		}
	})
}

// FuzzRenewal checks when a writer's Lease is renewed: at once when it never was or half its duration
// has passed, otherwise after the rest of that half — never later, never a negative wait.
func FuzzRenewal(f *testing.F) {
	f.Add(int64(15_000), int64(0), true)
	f.Add(int64(15_000), int64(7_500), false)
	f.Add(int64(1), int64(-5_000), false)
	f.Fuzz(func(t *testing.T, durationMillis, ageMillis int64, never bool) {
		if durationMillis <= 0 || durationMillis > 3_600_000 || ageMillis < -3_600_000 || ageMillis > 3_600_000 {
			return // leaseDurationSeconds is validated; renewTime within an hour of the clock either way
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		d := time.Duration(durationMillis) * time.Millisecond
		lease := &coordinationv1.Lease{}
		if !never {
			lease.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-time.Duration(ageMillis) * time.Millisecond)}
		}
		due, after := renewal(lease, d, now)
		switch {
		case never || time.Duration(ageMillis)*time.Millisecond >= d/2:
			if !due || after != d/2 {
				t.Fatalf("renewal(%v, age %dms) = %v, %v; want due, %v", d, ageMillis, due, after, d/2)
			}
		default:
			if due || after <= 0 || after > d/2-time.Duration(ageMillis)*time.Millisecond+time.Millisecond {
				t.Fatalf("renewal(%v, age %dms) = %v, %v", d, ageMillis, due, after)
			}
		}
	})
}
