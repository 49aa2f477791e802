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
func (w *work) record(name string, pod *corev1.Pod, reason clusterv1alpha1.RetirementReason, message string) {
	st := &w.sc.Status
	for _, rec := range st.Identities {
		if rec.Name == name {
			return
		}
	}
	now := metav1.NewTime(w.now)
	rec := clusterv1alpha1.IdentityRecord{Name: name, RetiredAt: &now, Reason: reason, Message: truncate(message, 1024),
		Claims: claimNames(w.sc, name)}
	if pod != nil {
		created := pod.CreationTimestamp
		rec.UID, rec.Node, rec.CreatedAt = pod.UID, pod.Spec.NodeName, &created
	}
	st.Identities = append([]clusterv1alpha1.IdentityRecord{rec}, st.Identities...)
	if limit := int(ptr.Deref(w.sc.Spec.IdentityHistoryLimit, 0)); len(st.Identities) > limit {
		st.Identities = st.Identities[:limit]
	}
}

// recordGone writes ledger entries for identities retired by someone else: pods being deleted or
// already gone that the operator did not delete (a user, an eviction, OnDelete updates).
func (w *work) recordGone() {
	for _, m := range w.pods {
		if m.pod == nil || !m.terminating {
			continue
		}
		if d, ours := w.r.mem.deletedByUs(m.pod.UID); ours {
			w.record(m.name, m.pod, d.reason, d.message)
			continue
		}
		reason, message := clusterv1alpha1.RetiredDeleted, "pod deleted by someone else"
		if node := w.nodes[m.pod.Spec.NodeName]; m.pod.Spec.NodeName != "" {
			if lost, _, _, msg := nodeLost(w.sc, node, w.now); lost {
				reason, message = clusterv1alpha1.RetiredNodeLost, msg
			}
		}
		w.record(m.name, m.pod, reason, message)
	}
	for _, g := range w.r.mem.takeGone(w.key) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: g.name, UID: g.uid, CreationTimestamp: metav1.NewTime(g.created)},
			Spec: corev1.PodSpec{NodeName: g.node}}
		reason, message := clusterv1alpha1.RetiredDeleted, "pod deleted by someone else"
		if g.reason != "" {
			reason, message = g.reason, g.message
		}
		w.record(g.name, pod, reason, message)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// applyStatus writes the observed state into the status, err being the reconcile's error, if any.
func (w *work) applyStatus(err error) {
	sc, st := w.sc, &w.sc.Status
	replicas := ptr.Deref(sc.Spec.Replicas, 0)
	var live, ready, avail, current, updated int32
	if w.revs != nil {
		for _, m := range w.liveMembers() {
			live++
			if m.ready {
				ready++
			}
			if m.available {
				avail++
			}
			if m.revision == w.revs.update.Name {
				updated++
			}
			if m.revision == w.revs.current.Name {
				current++
			}
		}
		st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas = live, ready, avail, updated
		st.UpdateRevision = w.revs.update.Name
		st.CurrentRevision = w.revs.current.Name
		if updated == live && live == replicas && w.countOld() == 0 {
			// The update is complete: the update revision becomes the current one.
			st.CurrentRevision = w.revs.update.Name
			current = updated
		}
		st.CurrentReplicas = current
		st.RetiredClaims = w.retiredClaims()
	}
	st.ObservedGeneration = sc.Generation
	if sel, serr := metav1.LabelSelectorAsSelector(sc.Spec.Selector); serr == nil {
		st.Selector = sel.String()
	}
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: sc.Generation})
	}
	if err != nil || len(w.failures) > 0 {
		msgs := append([]string{}, w.failures...)
		if err != nil {
			msgs = append(msgs, err.Error())
		}
		set(clusterv1alpha1.ConditionReplicaFailure, true, failureReason(msgs), truncate(strings.Join(msgs, "; "), 4000))
	} else {
		meta.RemoveStatusCondition(&st.Conditions, clusterv1alpha1.ConditionReplicaFailure)
	}
	w.applyHookCondition()
	if w.revs == nil {
		return
	}
	if avail >= replicas {
		set(clusterv1alpha1.ConditionAvailable, true, clusterv1alpha1.ReasonMinimumReplicasAvailable, fmt.Sprintf("%d of %d pods available", avail, replicas))
	} else {
		set(clusterv1alpha1.ConditionAvailable, false, clusterv1alpha1.ReasonMinimumReplicasUnavailable, fmt.Sprintf("%d of %d pods available", avail, replicas))
	}
	progress := w.progress
	if progress == "" && w.updateRun {
		progress = clusterv1alpha1.ReasonUpdating
	}
	if progress == "" && w.retiring > 0 {
		progress = clusterv1alpha1.ReasonReplacing
	}
	if progress == "" && live != replicas {
		progress = clusterv1alpha1.ReasonScalingUp
		if live > replicas {
			progress = clusterv1alpha1.ReasonScalingDown
		}
	}
	msg := fmt.Sprintf("%d live, %d ready, %d updated of %d replicas; next identity %d", live, ready, updated, replicas, st.NextIdentity)
	// Pods kept Pending because replacing them cannot help (stuck.go): Stalled until the cluster changes.
	// The message names no counters or durations, so that its Event is recorded once per change.
	var stuckReason string
	var stuckMsgs []string
	for _, m := range w.pods {
		if s := m.verdict.stuck; s != nil && !m.terminating {
			if stuckReason == "" {
				stuckReason = s.reason
			}
			stuckMsgs = append(stuckMsgs, s.message())
		}
	}
	if stuckReason != "" {
		stalled := truncate(strings.Join(stuckMsgs, "; "), 4000)
		set(clusterv1alpha1.ConditionStalled, true, stuckReason, stalled)
		if progress == "" {
			set(clusterv1alpha1.ConditionProgressing, false, clusterv1alpha1.ReasonReconciled, msg)
			set(clusterv1alpha1.ConditionReady, false, stuckReason, stalled)
			return
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, clusterv1alpha1.ConditionStalled)
	}
	if progress != "" {
		set(clusterv1alpha1.ConditionProgressing, true, progress, msg)
		set(clusterv1alpha1.ConditionReady, false, progress, msg)
		return
	}
	set(clusterv1alpha1.ConditionProgressing, false, clusterv1alpha1.ReasonReconciled, msg)
	switch {
	case ready < replicas || live != replicas:
		set(clusterv1alpha1.ConditionReady, false, clusterv1alpha1.ReasonPodsNotReady, msg)
	case updated != live && sc.Spec.UpdateStrategy.Type != clusterv1alpha1.OnDeleteStrategyType && w.wantUpdated() == int(replicas):
		set(clusterv1alpha1.ConditionReady, false, clusterv1alpha1.ReasonUpdating, msg)
	default:
		set(clusterv1alpha1.ConditionReady, true, clusterv1alpha1.ReasonReconciled, msg)
	}
}

// countOld counts live pods not of the update revision.
func (w *work) countOld() int {
	n := 0
	for _, m := range w.liveMembers() {
		if m.revision != w.revs.update.Name {
			n++
		}
	}
	return n
}

func failureReason(msgs []string) string {
	for _, m := range msgs {
		if strings.HasPrefix(m, "creating") {
			return clusterv1alpha1.ReasonCreateFailed
		}
	}
	return clusterv1alpha1.ReasonDeleteFailed
}

// patchStatus writes the status if it changed, under a resourceVersion precondition (the high-water
// mark must never be written from a stale copy), and keeps the written copy as the new baseline.
func (w *work) patchStatus(ctx context.Context, force bool) error {
	replaced := w.sc.ResourceVersion
	if wrote, err := opsutil.PatchStatus(ctx, w.r.Client, w.sc, w.orig, opsutil.WithOptimisticLock(), opsutil.Force(force)); !wrote {
		return err
	}
	w.r.mem.wrote(w.key, replaced, w.sc)
	w.orig = w.sc.DeepCopy()
	return nil
}
