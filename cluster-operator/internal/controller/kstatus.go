package controller

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/controllerutil"
)

// The kstatus conventions (sigs.k8s.io/cli-utils/pkg/kstatus, the library behind Flux, kpt and
// kubectl-based deploy tools): Stalled=True when the StatefulCluster cannot make progress without a
// change by the user (Failed), Reconciling=True while the operator is getting there on its own
// (InProgress), neither once Ready (Current). Both are derived from what applyStatus decided, so they
// cannot contradict Ready.

// problem is why the operator does not act on a spec.
type problem struct{ reason, message string }

// checkSpec returns why the spec cannot be acted on, or nil. The selector must parse and select the pods
// spec.template makes, as the StatefulSet API requires: otherwise status.selector (which kubectl scale
// and the HorizontalPodAutoscaler count pods with) would select none of the pods the status counts. The
// CRD refuses both at apply; an object stored before it did gets here and is reported, not acted on.
func checkSpec(sc *clusterv1alpha1.StatefulCluster) *problem {
	sel, err := metav1.LabelSelectorAsSelector(sc.Spec.Selector)
	if err != nil {
		return &problem{clusterv1alpha1.ReasonInvalidSelector, fmt.Sprintf(
			"spec.selector is invalid: %v; no pod is created or deleted until the StatefulCluster is re-created with a valid selector", err)}
	}
	// Labels only: the revision is not known here, and the selector may not name it (the CRD refuses that).
	pod := buildPod(sc, &sc.Spec.Template, "", sc.Name+"-0")
	if !sel.Matches(labels.Set(pod.Labels)) {
		return &problem{clusterv1alpha1.ReasonSelectorMismatch, fmt.Sprintf(
			"spec.selector (%s) does not select the pods spec.template makes (labels %s), as the StatefulSet API requires; no pod is created or deleted until the StatefulCluster is re-created with a matching selector",
			sel, labels.Set(sc.Spec.Template.Labels))}
	}
	return nil
}

// refuse records that the API server refused an object built from the spec as invalid: only a change
// of the spec can help, so it is reported (Stalled, InvalidTemplate) and not retried, and remembered
// for this generation so that no further identity is spent on it. Callers hold what guards s.refused.
func (s *scope) refuse(err error) {
	s.refused = truncate(err.Error(), 1024)
	s.r.mem.refuse(s.key, s.sc.Generation, s.refused)
}

// stalled returns the reason and message of Stalled, "" when the StatefulCluster can progress: a spec
// the operator does not act on, a template the API server refuses, a membership hook no pod can
// answer, and pods kept Pending because replacing them cannot help (stuck.go), until the cluster or the
// spec changes. The first one gives the reason; the message names them all, and no counters or
// durations, so that its Event is recorded once per change.
func (s *scope) stalled() (reason, message string) {
	var msgs []string
	add := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		msgs = append(msgs, msg)
	}
	if s.invalid != nil {
		add(s.invalid.reason, s.invalid.message)
	}
	if s.refused != "" {
		add(clusterv1alpha1.ReasonInvalidTemplate, "the API server refuses the pods of spec.template: "+s.refused+
			"; no pod is created until spec.template changes")
	}
	if s.hookStalled != "" {
		add(clusterv1alpha1.ReasonHookPortNotFound, s.hookStalled)
	}
	for _, m := range s.pods {
		if why := m.verdict.stuck; why != nil && !m.terminating {
			add(why.reason, why.message())
		}
	}
	return reason, truncate(strings.Join(msgs, "; "), 4000)
}

// applyReconciling sets Reconciling from the conditions applyStatus just set: True, with their reason
// and message, while Ready is False (known says Ready was decided by this reconcile), a failed write is
// retried (ReplicaFailure) or pods are not yet available (Available False); absent when Stalled (the
// user must act: kstatus reads Failed, not InProgress) or when there is nothing left to do.
func (s *scope) applyReconciling(stalled, known bool) {
	conds := &s.sc.Status.Conditions
	if stalled {
		meta.RemoveStatusCondition(conds, clusterv1alpha1.ConditionReconciling)
		return
	}
	var why *metav1.Condition
	if c := meta.FindStatusCondition(*conds, clusterv1alpha1.ConditionReady); known && c != nil && c.Status == metav1.ConditionFalse {
		why = c
	} else if c := meta.FindStatusCondition(*conds, clusterv1alpha1.ConditionReplicaFailure); c != nil && c.Status == metav1.ConditionTrue {
		why = c
	} else if c := meta.FindStatusCondition(*conds, clusterv1alpha1.ConditionAvailable); known && c != nil && c.Status == metav1.ConditionFalse {
		why = c
	}
	if why == nil {
		meta.RemoveStatusCondition(conds, clusterv1alpha1.ConditionReconciling)
		return
	}
	s.setCondition(clusterv1alpha1.ConditionReconciling, true, why.Reason, why.Message)
}

// waitingEvents records, once the status is written, an Event when the StatefulCluster enters a waiting
// state: a Warning when it stalls or its reasons to stall change (naming the pod, the claim, the field
// and why), otherwise a Normal Event when Reconciling turns True or changes its reason (scaling,
// replacing, updating, pods not Ready or not yet available, a failed write retried). before are the
// conditions as read at the start of the reconcile. Every waiting state is one of the two.
func (s *scope) waitingEvents(before []metav1.Condition) {
	var related runtime.Object
	for _, m := range s.pods {
		if m.verdict.stuck != nil && m.pod != nil {
			related = m.pod
			break
		}
	}
	if controllerutil.EventOnTransition(s.r.Recorder, s.sc, related, before, s.sc.Status.Conditions, controllerutil.Transition{
		Type: clusterv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, EventType: corev1.EventTypeWarning, Action: "Wait", CompareMessage: true,
	}) {
		return
	}
	controllerutil.EventOnTransition(s.r.Recorder, s.sc, nil, before, s.sc.Status.Conditions, controllerutil.Transition{
		Type: clusterv1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, EventType: corev1.EventTypeNormal, Action: "Wait",
	})
}
