package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Status: the StatefulSet status fields, the high-water mark, the identity ledger (recent retired
// identities, newest first, capped at identityHistoryLimit) and the retained claims.

// record adds a retired identity to the ledger (once per name: the ledger is a map keyed by name).
func (s *scope) record(name string, pod *corev1.Pod, reason clusterv1alpha1.RetirementReason, message string) {
	st := &s.sc.Status
	for _, rec := range st.Identities {
		if rec.Name == name {
			return
		}
	}
	now := metav1.NewTime(s.now)
	rec := clusterv1alpha1.IdentityRecord{Name: name, RetiredAt: &now, Reason: reason, Message: truncate(message, 1024),
		Claims: claimNames(s.sc, name)}
	if pod != nil {
		created := pod.CreationTimestamp
		rec.UID, rec.Node, rec.CreatedAt = pod.UID, pod.Spec.NodeName, &created
	}
	st.Identities = append([]clusterv1alpha1.IdentityRecord{rec}, st.Identities...)
	if limit := int(ptr.Deref(s.sc.Spec.IdentityHistoryLimit, 0)); len(st.Identities) > limit {
		st.Identities = st.Identities[:limit]
	}
}

// recordGone writes ledger entries for identities retired by someone else: pods being deleted or
// already gone that the operator did not delete (a user, an eviction, OnDelete updates).
func (r *Reconciler) recordGone(s *scope) {
	for _, m := range s.pods {
		if m.pod == nil || !m.terminating {
			continue
		}
		if d, ours := r.mem.deletedByUs(m.pod.UID); ours {
			s.record(m.name, m.pod, d.reason, d.message)
			continue
		}
		reason, message := clusterv1alpha1.RetiredDeleted, "pod deleted by someone else"
		if node := s.nodes[m.pod.Spec.NodeName]; m.pod.Spec.NodeName != "" {
			if lost, _, _, msg := nodeLost(s.sc, node, s.now); lost {
				reason, message = clusterv1alpha1.RetiredNodeLost, msg
			}
		}
		s.record(m.name, m.pod, reason, message)
	}
	for _, g := range r.mem.takeGone(s.key) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: g.name, UID: g.uid, CreationTimestamp: metav1.NewTime(g.created)},
			Spec: corev1.PodSpec{NodeName: g.node}}
		reason, message := clusterv1alpha1.RetiredDeleted, "pod deleted by someone else"
		if g.reason != "" {
			reason, message = g.reason, g.message
		}
		s.record(g.name, pod, reason, message)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// applyStatus writes the observed state into the status, err being the reconcile's error, if any.
// Without revisions (their sync failed) nothing about the pods is known: only the failure is written.
func (s *scope) applyStatus(err error) {
	var c counts
	if s.revs != nil {
		c = s.applyCounts()
	}
	st := &s.sc.Status
	st.ObservedGeneration = s.sc.Generation
	// A selector that does not parse selects nothing: an empty status.selector, not the last good one.
	st.Selector = ""
	if sel, serr := metav1.LabelSelectorAsSelector(s.sc.Spec.Selector); serr == nil {
		st.Selector = sel.String()
	}
	s.applyReplicaFailure(err)
	s.applyHookCondition()
	if s.revs == nil {
		// Ready and Available are as last observed; the failure being retried is what Reconciling says.
		s.applyReconciling(false, false)
		return
	}
	s.applyAvailable(c)
	s.applyReconciling(s.applyReady(c), true)
}

// counts are the live pods of a reconcile, as the status counts them.
type counts struct {
	replicas, live, ready, available, current, updated int32
}

// applyCounts writes the replica counts, the revisions and the retired claims.
func (s *scope) applyCounts() counts {
	st := &s.sc.Status
	c := counts{replicas: ptr.Deref(s.sc.Spec.Replicas, 0)}
	for _, m := range s.liveMembers() {
		c.live++
		if m.ready {
			c.ready++
		}
		if m.available {
			c.available++
		}
		if m.revision == s.revs.update.Name {
			c.updated++
		}
		if m.revision == s.revs.current.Name {
			c.current++
		}
	}
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas = c.live, c.ready, c.available, c.updated
	st.UpdateRevision = s.revs.update.Name
	st.CurrentRevision = s.revs.current.Name
	if c.updated == c.live && c.live == c.replicas && s.countOld() == 0 {
		// The update is complete: the update revision becomes the current one.
		st.CurrentRevision = s.revs.update.Name
		c.current = c.updated
	}
	st.CurrentReplicas = c.current
	st.RetiredClaims = s.retiredClaims()
	return c
}

// setCondition sets a condition of the status, True when ok.
func (s *scope) setCondition(t string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.sc.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.sc.Generation})
}

// applyReplicaFailure sets ReplicaFailure from what could not be written and the reconcile's error.
func (s *scope) applyReplicaFailure(err error) {
	if err == nil && len(s.failures) == 0 && s.refused == "" {
		meta.RemoveStatusCondition(&s.sc.Status.Conditions, clusterv1alpha1.ConditionReplicaFailure)
		return
	}
	msgs := append([]string{}, s.failures...)
	if s.refused != "" {
		msgs = append(msgs, "creating pods of spec.template: "+s.refused)
	}
	if err != nil {
		msgs = append(msgs, err.Error())
	}
	s.setCondition(clusterv1alpha1.ConditionReplicaFailure, true, failureReason(msgs), truncate(strings.Join(msgs, "; "), 4000))
}

func (s *scope) applyAvailable(c counts) {
	msg := fmt.Sprintf("%d of %d pods available", c.available, c.replicas)
	if c.available >= c.replicas {
		s.setCondition(clusterv1alpha1.ConditionAvailable, true, clusterv1alpha1.ReasonMinimumReplicasAvailable, msg)
	} else {
		s.setCondition(clusterv1alpha1.ConditionAvailable, false, clusterv1alpha1.ReasonMinimumReplicasUnavailable, msg)
	}
}

// progressReason is the reason of Progressing=True, or "" when nothing is under way.
func (s *scope) progressReason(c counts) string {
	switch {
	case s.progress != "":
		return s.progress
	case s.updateRun:
		return clusterv1alpha1.ReasonUpdating
	case s.retiring > 0:
		return clusterv1alpha1.ReasonReplacing
	case c.live > c.replicas:
		return clusterv1alpha1.ReasonScalingDown
	case c.live != c.replicas:
		return clusterv1alpha1.ReasonScalingUp
	}
	return ""
}

// applyReady sets Stalled, Progressing and Ready. Nothing progresses while the spec is not acted on or
// its pods are refused: whatever is missing stays missing until the user changes the spec.
func (s *scope) applyReady(c counts) bool {
	progress := s.progressReason(c)
	if s.invalid != nil || s.refused != "" {
		progress = ""
	}
	msg := fmt.Sprintf("%d live, %d ready, %d updated of %d replicas; next identity %d", c.live, c.ready, c.updated, c.replicas, s.sc.Status.NextIdentity)
	stuckReason, stalled := s.stalled()
	if stuckReason != "" {
		s.setCondition(clusterv1alpha1.ConditionStalled, true, stuckReason, stalled)
	} else {
		meta.RemoveStatusCondition(&s.sc.Status.Conditions, clusterv1alpha1.ConditionStalled)
	}
	switch {
	case progress != "":
		s.setCondition(clusterv1alpha1.ConditionProgressing, true, progress, msg)
		s.setCondition(clusterv1alpha1.ConditionReady, false, progress, msg)
	case stuckReason != "":
		s.setCondition(clusterv1alpha1.ConditionProgressing, false, clusterv1alpha1.ReasonReconciled, msg)
		s.setCondition(clusterv1alpha1.ConditionReady, false, stuckReason, stalled)
	case c.ready < c.replicas || c.live != c.replicas:
		s.setCondition(clusterv1alpha1.ConditionProgressing, false, clusterv1alpha1.ReasonReconciled, msg)
		s.setCondition(clusterv1alpha1.ConditionReady, false, clusterv1alpha1.ReasonPodsNotReady, msg)
	case c.updated != c.live && s.sc.Spec.UpdateStrategy.Type != clusterv1alpha1.OnDeleteStrategyType && s.wantUpdated() == int(c.replicas):
		s.setCondition(clusterv1alpha1.ConditionProgressing, false, clusterv1alpha1.ReasonReconciled, msg)
		s.setCondition(clusterv1alpha1.ConditionReady, false, clusterv1alpha1.ReasonUpdating, msg)
	default:
		s.setCondition(clusterv1alpha1.ConditionProgressing, false, clusterv1alpha1.ReasonReconciled, msg)
		s.setCondition(clusterv1alpha1.ConditionReady, true, clusterv1alpha1.ReasonReconciled, msg)
	}
	return stuckReason != ""
}

// countOld counts live pods not of the update revision.
func (s *scope) countOld() int {
	n := 0
	for _, m := range s.liveMembers() {
		if m.revision != s.revs.update.Name {
			n++
		}
	}
	return n
}

// failureReason is the reason of ReplicaFailure: CreateFailed or DeleteFailed when a pod or claim could
// not be created or deleted (the messages s.fail records), ReconcileError for any other failed read or
// write (a ControllerRevision, a claim's label or owner, an adoption, a list).
func failureReason(msgs []string) string {
	reason := clusterv1alpha1.ReasonReconcileError
	for _, m := range msgs {
		switch {
		case strings.HasPrefix(m, "creating pod") || strings.HasPrefix(m, "creating claim"):
			return clusterv1alpha1.ReasonCreateFailed
		case strings.HasPrefix(m, "retiring pod") || strings.HasPrefix(m, "scaling down pod") || strings.HasPrefix(m, "updating pod") ||
			strings.HasPrefix(m, "deleting claim"):
			reason = clusterv1alpha1.ReasonDeleteFailed
		}
	}
	return reason
}

// patchStatus writes the status if it changed, under a resourceVersion precondition (the high-water
// mark must never be written from a stale copy), records the write (ownwrites.go) and keeps the written
// copy as the new baseline.
func (s *scope) patchStatus(ctx context.Context, force bool) error {
	if wrote, err := opsutil.PatchStatus(ctx, s.r.Client, s.sc, s.orig, opsutil.WithOptimisticLock(), opsutil.Force(force)); !wrote {
		return err
	}
	s.r.writes.tracker.Wrote(s.sc)
	s.orig = s.sc.DeepCopy()
	return nil
}
