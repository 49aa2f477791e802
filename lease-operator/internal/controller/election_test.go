package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is a healthy pod db-<ordinal> with UID u<ordinal>.
func pod(ordinal int, mods ...func(*PodView)) PodView {
	p := PodView{Name: "db-" + string(rune('0'+ordinal)), UID: types.UID("u" + epochString(int32(ordinal))), Ordinal: ordinal, Ready: true, NodeReady: true}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func notReady(since time.Time) func(*PodView) {
	return func(p *PodView) { p.Ready, p.NotReadySince = false, since }
}
func terminating(p *PodView)  { p.Terminating = true }
func nodeNotReady(p *PodView) { p.NodeReady = false }
func recreated(p *PodView)    { p.UID += "-new" }

func holder(ordinal int) Holder {
	p := pod(ordinal)
	return Holder{Name: p.Name, UID: p.UID}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         ElectionInput
		want       Holder
		reason     string
		retryAfter time.Duration
	}{
		{name: "no pods, no holder: nobody, no change", in: ElectionInput{}},
		{name: "initial election takes the lowest ready ordinal",
			in:   ElectionInput{Pods: []PodView{pod(2), pod(1), pod(0, notReady(t0))}},
			want: holder(1), reason: leasev1.FailoverReasonInitialElection},
		{name: "initial election skips terminating pods and pods on NotReady nodes",
			in:   ElectionInput{Pods: []PodView{pod(0, terminating), pod(1, nodeNotReady), pod(2)}},
			want: holder(2), reason: leasev1.FailoverReasonInitialElection},
		{name: "a pod without an ordinal is never elected",
			in: ElectionInput{Pods: []PodView{{Name: "db-x", UID: "x", Ordinal: -1, Ready: true, NodeReady: true}}}},
		{name: "sticky: a healthy holder keeps the role although a lower ordinal is ready",
			in:   ElectionInput{Holder: holder(2), Pods: []PodView{pod(0), pod(1), pod(2)}},
			want: holder(2)},
		{name: "sticky: a holder recorded without UID (older Lease) keeps the role",
			in:   ElectionInput{Holder: Holder{Name: "db-1"}, Pods: []PodView{pod(0), pod(1)}},
			want: Holder{Name: "db-1"}},
		{name: "holder not ready fails over to the lowest ready ordinal",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, notReady(t0)), pod(1), pod(2)}, Now: t0},
			want: holder(1), reason: leasev1.FailoverReasonWriterNotReady},
		{name: "holder terminating (scale-down, rollout, eviction) fails over at once",
			in:   ElectionInput{Holder: holder(2), Pods: []PodView{pod(0), pod(1), pod(2, terminating)}},
			want: holder(0), reason: leasev1.FailoverReasonWriterTerminating},
		{name: "holder gone",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(1), pod(2)}},
			want: holder(1), reason: leasev1.FailoverReasonWriterGone},
		{name: "holder recreated under its name is not the holder: a new election, which may pick it again",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, recreated), pod(1)}},
			want: Holder{Name: "db-0", UID: "u0-new"}, reason: leasev1.FailoverReasonWriterGone},
		{name: "holder on a NotReady node, Ready still True in the API",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, nodeNotReady), pod(1)}},
			want: holder(1), reason: leasev1.FailoverReasonNodeNotReady},
		{name: "holder unusable and nobody eligible: no writer",
			in:     ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, notReady(t0)), pod(1, notReady(t0))}, Now: t0},
			reason: leasev1.FailoverReasonWriterNotReady},
		{name: "failover delay: a not-ready holder keeps the role until the delay has passed",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, notReady(t0)), pod(1)}, FailoverDelay: 5 * time.Second, Now: t0.Add(2 * time.Second)},
			want: holder(0), retryAfter: 3 * time.Second},
		{name: "failover delay passed",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, notReady(t0)), pod(1)}, FailoverDelay: 5 * time.Second, Now: t0.Add(5 * time.Second)},
			want: holder(1), reason: leasev1.FailoverReasonWriterNotReady},
		{name: "failover delay does not hold a terminating holder",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0, terminating, notReady(t0)), pod(1)}, FailoverDelay: time.Hour, Now: t0},
			want: holder(1), reason: leasev1.FailoverReasonWriterTerminating},
		{name: "switchover to a ready pod",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0), pod(1), pod(2)}, SwitchoverTo: "db-2"},
			want: holder(2), reason: leasev1.FailoverReasonSwitchover},
		{name: "switchover to a pod that is not ready is not done",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0), pod(1, notReady(t0))}, SwitchoverTo: "db-1", Now: t0},
			want: holder(0)},
		{name: "switchover to an unknown pod is not done",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(0)}, SwitchoverTo: "other-7"},
			want: holder(0)},
		{name: "switchover to the holder itself changes nothing",
			in:   ElectionInput{Holder: holder(1), Pods: []PodView{pod(0), pod(1)}, SwitchoverTo: "db-1"},
			want: holder(1)},
		{name: "switchover does not override a failover: the lowest ordinal wins when the holder is gone",
			in:   ElectionInput{Holder: holder(0), Pods: []PodView{pod(1), pod(2)}, SwitchoverTo: "db-2"},
			want: holder(1), reason: leasev1.FailoverReasonWriterGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.in)
			assert.Equal(t, tc.want, got.Writer)
			assert.Equal(t, tc.reason, got.Reason)
			assert.Equal(t, tc.reason != "", got.Reason != "")
			assert.Equal(t, tc.retryAfter, got.RetryAfter)
		})
	}
}

func TestOrdinal(t *testing.T) {
	for _, tc := range []struct {
		sts, pod string
		want     int
	}{
		{"db", "db-0", 0},
		{"db", "db-12", 12},
		{"db", "db-a", -1},
		{"db", "db-01", -1},
		{"db", "db--1", -1},
		{"db", "other-1", -1},
		{"my-db", "my-db-3", 3},
		{"db", "db-", -1},
	} {
		assert.Equal(t, tc.want, Ordinal(tc.sts, tc.pod), "%s / %s", tc.sts, tc.pod)
	}
}

func TestHasRole(t *testing.T) {
	mk := func(labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}}
	}
	lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Name: "lock"}, Spec: leasev1.StatefulSetLockSpec{LeaseName: "lease"}}
	writer := mk(map[string]string{leasev1.RoleLabel: leasev1.RoleWriter, leasev1.LockLabel: "lock", leasev1.WriterLeaseKeyLabel: "lease"},
		map[string]string{leasev1.WriterEpochAnnotation: "3", leasev1.WriterLeaseAnnotation: "lease"})
	assert.True(t, hasRole(writer, writerRole(lock, "3")))
	assert.False(t, hasRole(writer, writerRole(lock, "4")), "stale epoch")
	assert.False(t, hasRole(writer, readerRole(lock)))
	other := lock.DeepCopy()
	other.Name = "other"
	assert.False(t, hasRole(writer, writerRole(other, "3")), "labelled for another lock")
	assert.False(t, hasRole(mk(map[string]string{leasev1.RoleLabel: leasev1.RoleWriter, leasev1.LockLabel: "lock"},
		map[string]string{leasev1.WriterEpochAnnotation: "3"}), writerRole(lock, "3")), "a writer names its Lease")
	assert.False(t, hasRole(mk(map[string]string{leasev1.RoleLabel: leasev1.RoleReader}, nil), readerRole(lock)), "labelled by an older version: no lock label")
	reader := mk(map[string]string{leasev1.RoleLabel: leasev1.RoleReader, leasev1.LockLabel: "lock"}, nil)
	assert.True(t, hasRole(reader, readerRole(lock)))
	assert.False(t, hasRole(mk(map[string]string{leasev1.RoleLabel: leasev1.RoleReader, leasev1.LockLabel: "lock"}, map[string]string{leasev1.WriterEpochAnnotation: "1"}), readerRole(lock)), "a reader keeps no epoch")
	assert.True(t, hasRole(mk(nil, nil), role{}))
	assert.False(t, hasRole(mk(map[string]string{leasev1.RoleLabel: ""}, nil), role{}), "an empty label is still a label")
}

func TestRenewal(t *testing.T) {
	d := 10 * time.Second
	lease := func(renewed *time.Time) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		if renewed != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
		}
		return l
	}
	due, after := renewal(lease(nil), d, t0)
	assert.True(t, due)
	assert.Equal(t, 5*time.Second, after)
	due, after = renewal(lease(&t0), d, t0.Add(2*time.Second))
	assert.False(t, due)
	assert.Equal(t, 3*time.Second, after)
	due, _ = renewal(lease(&t0), d, t0.Add(5*time.Second))
	assert.True(t, due, "renewed at half the duration")
	// leaseDurationSeconds 1 still renews (every 500ms), unlike an integer division to 0.
	due, after = renewal(lease(&t0), time.Second, t0.Add(100*time.Millisecond))
	assert.False(t, due)
	assert.Equal(t, 400*time.Millisecond, after)
}

func TestApplyStatus(t *testing.T) {
	for _, tc := range []struct {
		state                           string
		available, progressing, errored bool
		ready                           bool
	}{
		{leasev1.ReasonAvailable, true, false, false, true},
		{leasev1.ReasonFailoverDelayed, true, true, false, false},
		{leasev1.ReasonNoReadyPods, false, false, false, false},
		{leasev1.ReasonStatefulSetNotFound, false, false, true, false},
		{leasev1.ReasonLeaseConflict, false, false, true, false},
		{leasev1.ReasonStatefulSetConflict, false, false, true, false},
	} {
		t.Run(tc.state, func(t *testing.T) {
			lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
			w := Holder{}
			if tc.state == leasev1.ReasonAvailable || tc.state == leasev1.ReasonFailoverDelayed {
				w = Holder{Name: "db-1", UID: "u1"}
			}
			applyStatus(&scope{lock: lock, state: tc.state, known: true, writer: w, transitions: 2, failoverReason: "WriterGone", failoverTime: t0})
			for cond, want := range map[string]bool{
				leasev1.ConditionAvailable: tc.available, leasev1.ConditionProgressing: tc.progressing,
				leasev1.ConditionError: tc.errored, leasev1.ConditionReady: tc.ready,
			} {
				c := findCondition(lock, cond)
				if assert.NotNil(t, c, cond) {
					assert.Equal(t, want, c.Status == metav1.ConditionTrue, cond)
					assert.Equal(t, tc.state, c.Reason, cond)
					assert.EqualValues(t, 4, c.ObservedGeneration)
				}
			}
			assert.EqualValues(t, 4, lock.Status.ObservedGeneration)
			assert.Equal(t, w.Name, lock.Status.WriterPod)
			assert.Equal(t, "WriterGone", lock.Status.LastFailoverReason)
			assert.EqualValues(t, 2, lock.Status.LeaseTransitions)
		})
	}
}

func findCondition(lock *leasev1.StatefulSetLock, condType string) *metav1.Condition {
	for i := range lock.Status.Conditions {
		if lock.Status.Conditions[i].Type == condType {
			return &lock.Status.Conditions[i]
		}
	}
	return nil
}
