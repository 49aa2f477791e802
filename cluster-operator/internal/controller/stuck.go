package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/controllerutil"
)

// Pods that replacing cannot help. A new identity differs from the pod it replaces only in its name and
// its claims: same pod template, same claim templates. So a pod Pending past pendingThresholdSeconds is
// kept and reported (condition Stalled, an Event) instead of replaced when
//   - a claim of the pod is not bound: the new identity's claims would come from the same templates and
//     wait the same way (no StorageClass or provisioner, provisioning failing, no matching volume);
//   - the scheduler marked it Unschedulable for a reason its own volumes do not cause (resources,
//     affinity, taints): the new pod would be scheduled the same way.
// A pod that is scheduled but does not start (its node or kubelet is gone), that the scheduler has not
// ruled on, or whose bound claims pin it (their volumes sit on a node or zone it cannot reach) is
// replaced past the threshold as before: new claims can be provisioned elsewhere.

// stuck is why a Pending pod is kept instead of replaced.
type stuck struct {
	pod    string
	claim  string // the claim that does not bind, for ClaimPending
	reason string // clusterv1alpha1.ReasonClaimPending or ReasonUnschedulable
	detail string // what the PersistentVolume controller or the scheduler said
}

func (s *stuck) message() string {
	if s.reason == clusterv1alpha1.ReasonClaimPending {
		return fmt.Sprintf("pod %s is Pending: its claim %s is not bound (%s); not replaced, a new identity's claims would wait the same way",
			s.pod, s.claim, s.detail)
	}
	return fmt.Sprintf("pod %s is Pending: unschedulable (%s); not replaced, a new identity would be the same pod", s.pod, s.detail)
}

// volumePinned are the kube-scheduler's words (VolumeBinding and VolumeZone plugins) for a pod held
// by the volumes its bound claims already have: a new identity with new claims can be placed elsewhere.
var volumePinned = []string{"volume node affinity conflict", "no available volume zone", "bound to non-existent pv"}

// claimBound reports whether a claim has a volume.
func claimBound(c *corev1.PersistentVolumeClaim) bool {
	return c.Spec.VolumeName != "" || c.Status.Phase == corev1.ClaimBound || c.Status.Phase == corev1.ClaimLost
}

// whyStuck says why replacing an unscheduled Pending pod would not help, or nil if it might.
func (s *scope) whyStuck(ctx context.Context, pod *corev1.Pod, claims map[string]*corev1.PersistentVolumeClaim) *stuck {
	if pod.Spec.NodeName != "" {
		return nil
	}
	cond := controllerutil.PodCondition(pod, corev1.PodScheduled)
	scheduler := ""
	if cond != nil && cond.Status == corev1.ConditionFalse {
		scheduler = cond.Message
	}
	for _, name := range claimNames(s.sc, pod.Name) {
		claim := claims[name]
		if claim == nil || claimBound(claim) || !claim.DeletionTimestamp.IsZero() {
			continue // a missing claim is created again (ensureClaims)
		}
		detail := s.claimEvent(ctx, claim)
		if detail == "" {
			detail = scheduler
		}
		if detail == "" {
			detail = "claim phase " + string(claim.Status.Phase)
		}
		return &stuck{pod: pod.Name, claim: name, reason: clusterv1alpha1.ReasonClaimPending, detail: detail}
	}
	if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable {
		return nil
	}
	for _, words := range volumePinned {
		if strings.Contains(cond.Message, words) {
			return nil
		}
	}
	return &stuck{pod: pod.Name, reason: clusterv1alpha1.ReasonUnschedulable, detail: cond.Message}
}

// claimEvent returns the newest Event about a claim ("reason: message"), a Warning one if any: the
// PersistentVolume controller and provisioners say why a claim does not bind only in Events. Read
// from the API server (Events are not cached), only for a pod already past its threshold.
func (s *scope) claimEvent(ctx context.Context, claim *corev1.PersistentVolumeClaim) string {
	var list corev1.EventList
	if err := s.r.APIReader.List(ctx, &list, client.InNamespace(claim.Namespace), client.MatchingFields{
		"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": claim.Name,
	}); err != nil {
		return ""
	}
	var best *corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if e.InvolvedObject.UID != "" && e.InvolvedObject.UID != claim.UID {
			continue // an Event about an earlier claim of the same name
		}
		if best == nil || (e.Type == corev1.EventTypeWarning) != (best.Type == corev1.EventTypeWarning) {
			if best == nil || e.Type == corev1.EventTypeWarning {
				best = e
			}
			continue
		}
		if eventTime(e).After(eventTime(best)) {
			best = e
		}
	}
	if best == nil {
		return ""
	}
	return best.Reason + ": " + best.Message
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
