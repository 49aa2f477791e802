package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// A rollout aware of a StatefulSetLock's writer (lease-operator). A partition move deletes the pods
// it releases; when one of them is the writer of a StatefulSetLock guarding the StatefulSet, the lock
// fails over only once the pod is terminating, and writes stop for that long. So before a step lowers
// the partition over the writer's pod, it asks the lock for a planned switchover (the lock's
// switchover annotation, which the lease-operator acts on and removes) to a Ready pod already on the
// update revision (else another Ready pod this move does not roll), and lowers the partition once the
// lock's status.writerPod is another pod: the write outage is one switchover, not a failover.
//
// Each operator is installed on its own: the StatefulSetLock kind may not be served at all. Locks are
// therefore not watched (a watch of a kind that is not served fails the manager's start); they are
// listed from the API server at each partition move, which also sees a lease-operator installed after
// this one, and a kind that is not served means no lock: the rollout goes on as without one.

// Listing the locks of the namespace at each partition move finds the one guarding the StatefulSet;
// patch writes only the lock's switchover annotation (and removes it after a timeout), which is all
// the admission policy config/locks admits from the operator.
// +kubebuilder:rbac:groups=app.anukkrit.me,resources=statefulsetlocks,verbs=list;patch

const (
	// DefaultSwitchoverTimeout bounds how long a step waits, once it asked for a switchover, for the
	// lock to move its writer. The lease-operator moves a writer to a Ready pod within milliseconds;
	// one that has not after a minute is not running, or the target cannot take over.
	DefaultSwitchoverTimeout = time.Minute
	// switchoverPoll is how often a step waiting for a switchover reads the lock again (locks are not
	// watched).
	switchoverPoll = time.Second
)

// writerLock returns the StatefulSetLock of the StatefulSet's namespace that guards it and has a
// writer, nil when there is none or the StatefulSetLock kind is not served (no lease-operator). Two
// locks naming one StatefulSet: the lease-operator lets the older one act, and only it has a writer.
func (r *Reconciler) writerLock(ctx context.Context, sts *appsv1.StatefulSet) (*leasev1.StatefulSetLock, error) {
	var list leasev1.StatefulSetLockList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(sts.Namespace)); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil // the kind is not served (NotFound: its CRD was just deleted)
		}
		return nil, fmt.Errorf("listing the StatefulSetLocks of namespace %s: %w", sts.Namespace, err)
	}
	for i := range list.Items {
		l := &list.Items[i]
		if l.Spec.StatefulSetName == sts.Name && l.Status.WriterPod != "" && l.DeletionTimestamp.IsZero() {
			return l, nil
		}
	}
	return nil, nil
}

// writerGate returns how far a step may lower the partition now, on its way from partition down to
// next: next, unless that rolls the pod of a StatefulSetLock's writer. Then it asks the lock for a
// switchover and returns the partition just above the writer (the pods above it may go, in a batch)
// until the lock's writer is another pod; status.switchover records the wait. It gives up waiting
// (Warning Event, the pod is rolled and the lock fails over) when the StatefulSet has no other pod,
// or when the lock has not moved its writer within the switchover timeout of the request.
func (r *Reconciler) writerGate(ctx context.Context, s *scope, partition, next int32) (int32, error) {
	pr, sts := s.pr, s.sts
	if next >= partition {
		return next, nil
	}
	lock, err := r.writerLock(ctx, sts)
	if err != nil {
		return partition, err
	}
	w := int32(-1)
	if lock != nil {
		w = podIndex(sts, lock.Status.WriterPod)
	}
	if w < next || w >= partition {
		pr.Status.Switchover = nil // no writer among the pods this move rolls
		return next, nil
	}
	writer := lock.Status.WriterPod
	sw := pr.Status.Switchover
	if sw == nil || sw.Lock != lock.Name || sw.From != writer || sw.Partition != partition {
		sw = &rolloutv1alpha1.SwitchoverStatus{Lock: lock.Name, From: writer, Partition: partition, Since: metav1.NewTime(s.now)}
		pr.Status.Switchover = sw
	}
	if s.replicas < 2 {
		s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventNoSwitchoverTarget,
			"pod %s is the writer of StatefulSetLock %s and StatefulSet %s has no other pod to take over: it is rolled now, writes stop until it is back", writer, lock.Name, sts.Name)
		pr.Status.Switchover = nil
		return next, nil
	}
	if sw.RequestedAt != nil && !s.now.Before(sw.RequestedAt.Add(r.SwitchoverTimeout)) {
		s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventSwitchoverTimedOut,
			"StatefulSetLock %s did not move its writer from pod %s to pod %s within %s of the request: pod %s is rolled now and the lock fails over when it terminates (is the lease-operator running?)",
			lock.Name, writer, sw.To, r.SwitchoverTimeout, writer)
		r.cancelSwitchover(ctx, lock, sw.To)
		pr.Status.Switchover = nil
		return next, nil
	}
	s.waitingForSwitchover = true
	pods, err := r.pods(ctx, sts)
	if err != nil {
		return w + 1, err
	}
	target := switchoverTarget(sts, pods, s.replicas, partition, next, s.now, lock.Annotations[leasev1.SwitchoverAnnotation], sw.To)
	if target == "" {
		// Nobody can take over yet (e.g. the pods of this batch are being recreated): wait for one.
		sw.To = ""
		return w + 1, nil
	}
	if lock.Annotations[leasev1.SwitchoverAnnotation] != target {
		if err := r.requestSwitchover(ctx, lock, target); err != nil {
			return w + 1, err
		}
		s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventSwitchoverRequested,
			"asked StatefulSetLock %s to move its writer from pod %s to pod %s before the partition of StatefulSet %s moves to %d", lock.Name, writer, target, sts.Name, next)
	}
	sw.To = target
	if sw.RequestedAt == nil {
		// Rounded up as the step's other times (ceilSecond): read back, it never shortens the wait.
		sw.RequestedAt = &metav1.Time{Time: ceilSecond(s.now)}
	}
	return w + 1, nil
}

// switchoverTarget picks the pod the writer moves to before the move from partition to next rolls
// it: one the lock can promote now (Ready, not terminating) and the move does not roll. A pod already
// on the update revision comes first, as it will not be rolled again in this rollout; else the other
// pod with the lowest ordinal, as the one rolled last. A pod already asked for (the lock's annotation,
// then the last request) is kept while it qualifies, so the request does not flip between pods.
func switchoverTarget(sts *appsv1.StatefulSet, pods map[string]*corev1.Pod, replicas, partition, next int32, now time.Time, asked ...string) string {
	fits := func(i int32, updated bool) bool {
		p, ok := pods[podName(sts, i)]
		if !ok || !available(p, 0, now) || (i >= next && i < partition) {
			return false
		}
		onUpdate := p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision
		if i >= partition {
			return onUpdate // a pod above the partition not yet on it is about to restart
		}
		return !updated
	}
	for _, name := range asked {
		if i := podIndex(sts, name); i >= 0 && i < replicas && (fits(i, true) || fits(i, false)) {
			return name
		}
	}
	for _, updated := range []bool{true, false} {
		for i := range replicas {
			if fits(i, updated) {
				return podName(sts, i)
			}
		}
	}
	return ""
}

// podIndex is the index (ordinal less spec.ordinals.start) of the StatefulSet's pod name, -1 when
// the name is not one of its pods'.
func podIndex(sts *appsv1.StatefulSet, name string) int32 {
	rest, ok := strings.CutPrefix(name, sts.Name+"-")
	if !ok {
		return -1
	}
	ordinal, err := strconv.ParseInt(rest, 10, 32)
	if err != nil || strconv.FormatInt(ordinal, 10) != rest {
		return -1
	}
	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	if int32(ordinal) < start {
		return -1
	}
	return int32(ordinal) - start
}

// requestSwitchover sets the lock's switchover annotation to target (a merge patch of that one
// annotation: the lease-operator removes it once the writer is the target).
func (r *Reconciler) requestSwitchover(ctx context.Context, lock *leasev1.StatefulSetLock, target string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{leasev1.SwitchoverAnnotation: target}}})
	obj := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Namespace: lock.Namespace, Name: lock.Name}}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("asking StatefulSetLock %s for a switchover to pod %s: %w", lock.Name, target, err)
	}
	return nil
}

// cancelSwitchover removes the switchover annotation the step wrote once it stopped waiting for it,
// so that a lease-operator that comes back later does not move a writer nobody asks to move any more.
// A JSON patch that tests the value first: an annotation someone else set meanwhile stays.
func (r *Reconciler) cancelSwitchover(ctx context.Context, lock *leasev1.StatefulSetLock, target string) {
	if target == "" || lock.Annotations[leasev1.SwitchoverAnnotation] != target {
		return
	}
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(leasev1.SwitchoverAnnotation, "~", "~0"), "/", "~1")
	value, _ := json.Marshal(target)
	patch := fmt.Sprintf(`[{"op":"test","path":%q,"value":%s},{"op":"remove","path":%q}]`, path, value, path)
	obj := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Namespace: lock.Namespace, Name: lock.Name}}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		log.FromContext(ctx).Info("could not remove the switchover annotation", "lock", lock.Name, "error", err.Error())
	}
}

// switchoverMessage says what a step waiting for a switchover waits for.
func switchoverMessage(sw *rolloutv1alpha1.SwitchoverStatus) string {
	if sw == nil {
		return "waiting for a StatefulSetLock to move its writer"
	}
	if sw.To == "" {
		return fmt.Sprintf("waiting for a Ready pod to take over the writer of StatefulSetLock %s from pod %s before pod %s is rolled", sw.Lock, sw.From, sw.From)
	}
	return fmt.Sprintf("waiting for StatefulSetLock %s to move its writer from pod %s to pod %s before pod %s is rolled", sw.Lock, sw.From, sw.To, sw.From)
}
