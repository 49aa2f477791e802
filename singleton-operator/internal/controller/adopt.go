package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
)

// adoptable reports whether the singleton's only pod that is not terminal carries no start hold, so
// that it is adopted once it runs (never while the StatefulSingleton is being deleted).
func (s *scope) adoptable() bool {
	pods := s.pods
	return !s.deleting && len(pods.ungated) == 1 && len(pods.blocking) == 1 && len(pods.held) == 0
}

// reconcileUngated reports the pods without a start hold that are not adopted (condition UngatedPod,
// an Event each when the condition begins) and deletes them while another pod is active.
func (r *Reconciler) reconcileUngated(ctx context.Context, s *scope) error {
	pods, ss, status := s.pods, s.ss, s.status
	if len(pods.ungated) == 0 {
		meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionUngatedPod)
		return nil
	}
	reported := meta.IsStatusConditionTrue(status.Conditions, singletonv1.ConditionUngatedPod)
	reason, msg := ungatedReport(pods, s.adoptable())
	setCondition(status, ss, singletonv1.ConditionUngatedPod, metav1.ConditionTrue, reason, msg)
	for _, pod := range pods.ungated {
		if !reported {
			r.Recorder.Eventf(ss, pod, corev1.EventTypeWarning, singletonv1.ConditionUngatedPod, "Report", "pod %s matches the selector but carries no start hold", pod.Name)
		}
		if len(pods.active) > 0 && pod.DeletionTimestamp.IsZero() {
			if err := r.deletePod(ctx, pod); err != nil {
				return err
			}
			r.Recorder.Eventf(ss, pod, corev1.EventTypeWarning, singletonv1.ConditionUngatedPod, "Delete", "deleted pod %s: it carries no start hold while pod %s is active", pod.Name, pods.active[0].Name)
		}
	}
	return nil
}

// adopt makes pod the active pod: it runs without a start hold and is the only pod of the singleton
// that is not terminal, so nothing else can run beside it. Like a release, adoption is confirmed with
// the API server and stamps a reserved epoch on the pod (with the adopted annotation, in one patch that
// carries the pod's UID); from then on the pod is released in every respect: it blocks every release,
// and the next rollout or deletion hands over from it. An adoption the API server does not confirm
// writes no status.
func (r *Reconciler) adopt(ctx context.Context, s *scope, pod *corev1.Pod) (reconcile.Result, error) {
	ss, status := s.ss, s.status
	live, epoch, err := r.reserveAndList(ctx, s)
	if err != nil || live == nil {
		s.skipStatus = true
		return reconcile.Result{}, err
	}
	if len(live.held) > 0 || len(live.blocking) != 1 || live.blocking[0].UID != pod.UID ||
		classify(live.blocking[0]) != stateUngated || !runs(live.blocking[0]) ||
		slices.ContainsFunc(live.all, func(p *corev1.Pod) bool { return podEpoch(p) >= epoch }) {
		s.skipStatus = true
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind; look again (the epoch is skipped)
	}
	value := strconv.FormatInt(epoch, 10)
	// The singleton label too, as the webhook puts it on the pods it admits: the anti-affinity of the
	// next pods then steers them away from the adopted pod's node, and tools that group pods by
	// singleton see it.
	patch, err := instancePatch(pod.UID, map[string]any{
		"labels":      map[string]string{singletonv1.LabelSingleton: podmutation.SingletonLabelValue(ss.Name)},
		"annotations": map[string]string{singletonv1.AnnotationEpoch: value, singletonv1.AnnotationAdopted: "true"}})
	if err != nil {
		return reconcile.Result{}, err
	}
	adopted := live.blocking[0].DeepCopy()
	if err := r.Client.Patch(ctx, adopted, patch); err != nil {
		s.skipStatus = true
		return reconcile.Result{}, client.IgnoreNotFound(err) // the epoch is skipped; a pod gone is reconciled again
	}
	logf.FromContext(ctx).Info("Adopted pod", "pod", pod.Name, "epoch", epoch)
	recordActive(s, pod, "pod "+pod.Name+" is active (adopted: it was running without a start hold)")
	meta.RemoveStatusCondition(&status.Conditions, singletonv1.ConditionUngatedPod)
	r.Recorder.Eventf(ss, pod, corev1.EventTypeNormal, singletonv1.ReasonAdopted, "Adopt",
		"adopted running pod %s as the active pod with epoch %d; its start was not held (it was created without a start hold, e.g. before the namespace was labelled for the pod webhook); the next rollout or deletion hands over from it", pod.Name, epoch)
	if err := r.markReady(ctx, adopted); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// ungatedReport is the UngatedPod condition's reason and message for the singleton's pods without a start
// hold, which were not adopted.
func ungatedReport(pods *classifiedPods, adoptable bool) (string, string) {
	var staying, going []*corev1.Pod // blocking pods: not being deleted, being deleted
	for _, p := range pods.blocking {
		if p.DeletionTimestamp.IsZero() {
			staying = append(staying, p)
		} else {
			going = append(going, p)
		}
	}
	names := podNames(pods.ungated)
	switch {
	case adoptable:
		return singletonv1.ReasonWaitingToAdopt, fmt.Sprintf("pod %s carries no start hold and does not run yet (phase %s); it is adopted as the active pod once it runs", names, pods.ungated[0].Status.Phase)
	case len(pods.held) == 0 && len(staying) == 1 && classify(staying[0]) == stateUngated:
		return singletonv1.ReasonWaitingToAdopt, fmt.Sprintf("pod %s carries no start hold; it is adopted as the active pod once pods %s, being deleted, are gone", staying[0].Name, podNames(going))
	case len(pods.held) == 0 && len(pods.active) == 0 && len(staying) > 1:
		return singletonv1.ReasonSeveralPodsWithoutHold, fmt.Sprintf("pods %s carry no start hold (created before the namespace was labelled for the pod webhook, or around it), so none is adopted: only a singleton's only pod is. Scale the workload to one replica or delete all but one of these pods; pods created from now on are held", podNames(staying))
	default:
		return singletonv1.ReasonPodWithoutHold, fmt.Sprintf("pods %s match the selector but carry no start hold (admitted around the webhook); a pod without a hold is adopted only when it is the singleton's only pod, and it is deleted while another pod is active", names)
	}
}

// runs reports whether the pod runs on a node and is not being deleted (adoption's precondition).
func runs(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero()
}
