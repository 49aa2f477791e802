package controller

import (
	"strconv"
	"testing"
	"time"

	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// FuzzStatefulSetLockSpec checks that the CRD's validation (schema and CEL, run in process by
// shared/api/crdvalidation) and the operator's own decisions agree. It mutates a documented example or a
// bad input of docs/bad-input.md; for every object the API server would accept:
//   - the Lease the operator would write is valid: its name (spec.leaseName), its lock label (the
//     lock's name: issue 16 case 4, a name over 63 characters made the label invalid), its duration;
//   - the pods of spec.statefulSetName have valid names and parse back to their ordinals, and the
//     role labels are valid on them;
//   - the election on those pods with the spec's failover delay elects the lowest Ready ordinal, a
//     not-Ready writer waits at most the delay, and nothing panics.
//
// The lock's waiting states (StatefulSetNotFound, StatefulSetConflict with another lock, LeaseConflict
// with a foreign Lease) depend on other objects, not on the spec: CEL cannot see them, and this target
// does not reach them. A refused object asserts nothing.
func FuzzStatefulSetLockSpec(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	crdvalidation.Fuzz(f, "StatefulSetLock", func(t *testing.T, lock *leasev1.StatefulSetLock, fail func(string, ...any)) {
		if errs := validation.IsDNS1123Subdomain(lock.Spec.LeaseName); len(errs) > 0 {
			fail("Lease name %q: %v", lock.Spec.LeaseName, errs)
		}
		leaseLabels := map[string]string{leasev1.LockLabel: lock.Name}
		if errs := metavalidation.ValidateLabels(leaseLabels, field.NewPath("metadata", "labels")); len(errs) > 0 {
			fail("the Lease's labels: %v", errs)
		}
		if lock.Spec.LeaseDurationSeconds <= 0 || lock.Spec.FailoverDelaySeconds < 0 {
			fail("leaseDurationSeconds %d, failoverDelaySeconds %d", lock.Spec.LeaseDurationSeconds, lock.Spec.FailoverDelaySeconds)
		}
		delay := time.Duration(lock.Spec.FailoverDelaySeconds) * time.Second
		var pods []PodView
		for i, ready := range []bool{false, true, true} {
			name := lock.Spec.StatefulSetName + "-" + strconv.Itoa(i)
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
				fail("pod name %q: %v", name, errs)
			}
			if got := Ordinal(lock.Spec.StatefulSetName, name); got != i {
				fail("Ordinal(%q, %q) = %d, want %d", lock.Spec.StatefulSetName, name, got, i)
			}
			pods = append(pods, PodView{Name: name, UID: types.UID("u" + name), Ordinal: i, Ready: ready, NodeReady: true,
				NotReadySince: now.Add(-time.Second)})
		}
		for _, role := range []string{leasev1.RoleWriter, leasev1.RoleReader} {
			if errs := metavalidation.ValidateLabels(map[string]string{leasev1.RoleLabel: role}, field.NewPath("metadata", "labels")); len(errs) > 0 {
				fail("role label %q: %v", role, errs)
			}
		}
		d := Decide(ElectionInput{Pods: pods, FailoverDelay: delay, Now: now})
		if d.Writer.Name != pods[1].Name {
			fail("initial election chose %q, want %q", d.Writer.Name, pods[1].Name)
		}
		held := Decide(ElectionInput{Holder: Holder{Name: pods[0].Name, UID: pods[0].UID}, Pods: pods, FailoverDelay: delay, Now: now})
		if held.RetryAfter > delay || (held.Writer.Name == pods[0].Name && delay > time.Second && held.RetryAfter <= 0) {
			fail("a not-Ready writer with failover delay %s: %+v", delay, held)
		}
	})
}
