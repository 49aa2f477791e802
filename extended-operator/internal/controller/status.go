package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// outcome is what one reconcile found and did, from which the status is computed.
type outcome struct {
	versions        []*version
	newest, current *version
	// missing are the non-optional referenced ConfigMaps and Secrets that do not exist ("Kind/name").
	missing []string
	// waiting says why a new template does not start a version yet; waitReason is the condition reason
	// (default PodsNotReady).
	waiting, waitReason string
	// configPending: a configuration change waits for its debounce; configRolled: it was applied now.
	configPending, configRolled bool
	errMessage                  string
	requeueAfter                time.Duration
}

// live are the versions not being deleted.
func (o *outcome) live() []*version {
	var out []*version
	for _, v := range o.versions {
		if v.sts.DeletionTimestamp.IsZero() {
			out = append(out, v)
		}
	}
	return out
}

// applyStatus computes the status from the outcome. Conditions change their lastTransitionTime only when
// their status changes.
func (r *Reconciler) applyStatus(ests *extendedv1alpha1.ExtendedStatefulSet, o *outcome) {
	st := &ests.Status
	st.ObservedGeneration = ests.Generation
	if sel := ests.Spec.Template.Spec.Selector; sel != nil {
		if s, err := metav1.LabelSelectorAsSelector(sel); err == nil {
			st.Selector = s.String()
		}
	}
	live := o.live()
	st.Versions = map[string]bool{}
	st.Replicas, st.ReadyReplicas, st.UpdatedReplicas, st.CanaryRetries = 0, 0, 0, 0
	for _, v := range live {
		st.Versions[strconv.Itoa(v.number)] = v.running()
		st.Replicas += v.sts.Status.Replicas
		st.ReadyReplicas += v.sts.Status.ReadyReplicas
	}
	if len(st.Versions) == 0 {
		st.Versions = nil
	}
	if o.current != nil {
		st.CurrentVersion = int32(o.current.number)
	}
	if o.newest != nil {
		st.UpdateVersion = int32(o.newest.number)
		st.UpdatedReplicas = o.newest.sts.Status.Replicas
		st.CanaryRetries = o.newest.intAnnotation(extendedv1alpha1.CanaryRetriesAnnotation)
		if h := o.newest.configHash(); h != "" {
			st.ConfigHash = h
		}
	}

	set := func(t string, status bool, reason, msg string) {
		s := metav1.ConditionFalse
		if status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: ests.Generation})
	}

	// MissingReference.
	if len(o.missing) > 0 {
		set(extendedv1alpha1.ConditionMissingReference, true, extendedv1alpha1.ReasonReferenceNotFound,
			"referenced but missing: "+strings.Join(o.missing, ", ")+"; pods are not rolled until it exists")
	} else {
		set(extendedv1alpha1.ConditionMissingReference, false, extendedv1alpha1.ReasonReconciled, "every referenced ConfigMap and Secret exists")
	}

	// Stale.
	stale := o.newest != nil && o.newest.stale() && o.newest.sts.DeletionTimestamp.IsZero()
	if stale {
		reason, msg, _ := strings.Cut(o.newest.annotation(extendedv1alpha1.StaleReasonAnnotation), ": ")
		if reason == "" {
			reason = extendedv1alpha1.ReasonCanaryFailed
		}
		set(extendedv1alpha1.ConditionStale, true, reason, msg)
	} else {
		set(extendedv1alpha1.ConditionStale, false, extendedv1alpha1.ReasonReconciled, "no version is stale")
	}

	// Progressing and Ready.
	progressReason, progressMsg := "", ""
	switch {
	case o.errMessage != "":
		progressReason, progressMsg = "ReconcileError", o.errMessage
	case o.waiting != "":
		progressReason, progressMsg = extendedv1alpha1.ReasonPodsNotReady, o.waiting
		if o.waitReason != "" {
			progressReason = o.waitReason
		}
		if len(o.missing) > 0 {
			progressReason = extendedv1alpha1.ReasonReferenceNotFound
		}
	case o.newest != nil && !stale && o.newest.phase() == extendedv1alpha1.PhaseCanary:
		progressReason, progressMsg = extendedv1alpha1.ReasonCanaryRollout,
			fmt.Sprintf("version %d: %d of %d canaries Ready", o.newest.number, o.newest.ready(), o.newest.specReplicas())
	case o.newest != nil && !stale && o.newest.phase() == extendedv1alpha1.PhaseRollout:
		progressReason, progressMsg = extendedv1alpha1.ReasonRollout,
			fmt.Sprintf("version %d: %d of %d pods Ready", o.newest.number, o.newest.ready(), o.newest.specReplicas())
	case len(live) > 1 && !stale:
		progressReason, progressMsg = extendedv1alpha1.ReasonCleanup, "lower versions are being deleted"
	case o.configPending || o.configRolled || (o.current != nil && !o.current.rolledOut() && o.current.sts.Status.UpdatedReplicas < o.current.specReplicas()):
		progressReason, progressMsg = extendedv1alpha1.ReasonConfigChanged, "referenced configuration changed: pods are rolling"
	}
	if progressReason != "" && progressReason != "ReconcileError" {
		set(extendedv1alpha1.ConditionProgressing, true, progressReason, progressMsg)
	} else if progressReason == "" {
		set(extendedv1alpha1.ConditionProgressing, false, extendedv1alpha1.ReasonReconciled, "no upgrade or restart under way")
	}

	switch {
	case o.errMessage != "":
		set(extendedv1alpha1.ConditionReady, false, "ReconcileError", o.errMessage)
	case stale:
		msg := fmt.Sprintf("version %d is stale", o.newest.number)
		if o.current != nil {
			msg += fmt.Sprintf("; version %d serves", o.current.number)
		}
		set(extendedv1alpha1.ConditionReady, false, extendedv1alpha1.ReasonCanaryFailed, msg+"; change the template to try again")
	case progressReason != "":
		set(extendedv1alpha1.ConditionReady, false, progressReason, progressMsg)
	case len(o.missing) > 0:
		set(extendedv1alpha1.ConditionReady, false, extendedv1alpha1.ReasonReferenceNotFound, "a referenced ConfigMap or Secret is missing")
	case o.current == nil || !o.current.rolledOut():
		set(extendedv1alpha1.ConditionReady, false, extendedv1alpha1.ReasonPodsNotReady, "not every pod is Ready")
	default:
		set(extendedv1alpha1.ConditionReady, true, extendedv1alpha1.ReasonReconciled,
			fmt.Sprintf("version %d runs with all %d pods Ready", o.current.number, o.current.specReplicas()))
	}
}

// patchStatus writes the status when it differs from orig's.
func (r *Reconciler) patchStatus(ctx context.Context, ests, orig *extendedv1alpha1.ExtendedStatefulSet) error {
	if equality.Semantic.DeepEqual(ests.Status, orig.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, ests, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	return nil
}

// event records an Event about the ExtendedStatefulSet, related to one of its StatefulSets.
func (r *Reconciler) event(ests *extendedv1alpha1.ExtendedStatefulSet, related runtime.Object, eventType, reason, action, format string, args ...any) {
	r.Recorder.Eventf(ests, related, eventType, reason, action, format, args...)
}
