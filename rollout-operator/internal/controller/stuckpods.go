package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Stuck-pod recovery (spec.recreateStuckPods): the StatefulSet controller never replaces a pod that
// crash-loops on a bad revision, even after the template is fixed (kubernetes/kubernetes#67250: with
// OrderedReady it waits for that pod to be Ready first). The operator deletes such a pod, with a UID
// precondition, so the StatefulSet controller recreates it: from the update revision at or above the
// partition, from the current revision below it (both differ from the bad one).

// recreateStuckPods deletes a pod stuck not Ready on an outdated revision (stuckpods.go) so that its
// StatefulSet recreates it; the pod-deletes admission policy admits only pods a StatefulSet controls,
// outside the system namespaces.
// +kubebuilder:rbac:groups="",resources=pods,verbs=delete

// recreateStuckPod deletes, when spec.recreateStuckPods is true, at most one pod per step (partition
// and update revision): the highest ordinal that has not been Ready for progressDeadlineSeconds,
// runs a revision other than the update revision, was created before the update revision's
// ControllerRevision (by revision number: after a revert the update revision is an earlier
// ControllerRevision, renumbered) and would come back on another revision (at or above the partition, or below it
// on a revision other than the current one), and only while no more pods are unavailable than
// maxUnavailable allows.
func (r *Reconciler) recreateStuckPod(ctx context.Context, s *scope, partition int32) error {
	pr, sts := s.pr, s.sts
	update := sts.Status.UpdateRevision
	if !ptr.Deref(pr.Spec.RecreateStuckPods, false) {
		return nil
	}
	if rec := pr.Status.LastStuckPodRecreated; rec != nil && rec.Partition == partition && rec.UpdateRevision == update {
		return nil // one per step
	}
	pods, err := r.pods(ctx, sts)
	if err != nil {
		return err
	}
	minReady := time.Duration(sts.Spec.MinReadySeconds) * time.Second
	unavailable := int32(0)
	for i := range s.replicas {
		if p, ok := pods[podName(sts, i)]; !ok || !available(p, minReady, s.now) {
			unavailable++
		}
	}
	if unavailable == 0 || unavailable > maxUnavailable(sts, s.replicas) {
		return nil
	}
	rev := &appsv1.ControllerRevision{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sts.Namespace, Name: update}, rev); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // cannot tell which pods predate the update revision
		}
		return fmt.Errorf("reading ControllerRevision %s: %w", update, err)
	}
	deadline := time.Duration(ptr.Deref(pr.Spec.ProgressDeadlineSeconds, 600)) * time.Second
	predates := func(p *corev1.Pod) (bool, error) { return opsutil.PodPredatesRevision(ctx, r.APIReader, p, rev) }
	p, notReady, err := stuckPod(s, pods, partition, predates, deadline)
	if err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	uid := p.UID
	if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone or replaced meanwhile: nothing to do
		}
		return fmt.Errorf("deleting stuck pod %s: %w", p.Name, err)
	}
	revision := p.Labels[appsv1.ControllerRevisionHashLabelKey]
	pr.Status.LastStuckPodRecreated = &rolloutv1alpha1.StuckPodRecord{
		Pod: p.Name, UID: string(uid), Revision: revision, UpdateRevision: update, Partition: partition,
		NotReadySeconds: int64(notReady / time.Second), Time: metav1.NewTime(s.now),
	}
	log.FromContext(ctx).Info("deleted a stuck pod", "pod", p.Name, "revision", revision, "updateRevision", update, "notReady", notReady)
	s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventStuckPodRecreated,
		"pod %s (revision %s) was not Ready for %s, longer than progressDeadlineSeconds, and StatefulSet %s's update revision is now %s: deleted so that the StatefulSet controller recreates it",
		p.Name, revision, notReady.Round(time.Second), sts.Name, update)
	return nil
}

// stuckPod returns the highest-ordinal pod recreateStuckPod may delete, and how long it has not been
// Ready; predates tells whether a pod's revision predates the update revision
// (opsutil.PodPredatesRevision: revision numbers, so that a revert to an earlier template counts).
func stuckPod(s *scope, pods map[string]*corev1.Pod, partition int32, predates func(*corev1.Pod) (bool, error), deadline time.Duration) (*corev1.Pod, time.Duration, error) {
	sts := s.sts
	var candidates []int32
	for i := range s.replicas {
		candidates = append(candidates, i)
	}
	sort.Slice(candidates, func(a, b int) bool { return candidates[a] > candidates[b] })
	for _, i := range candidates {
		p, ok := pods[podName(sts, i)]
		if !ok || !p.DeletionTimestamp.IsZero() {
			continue
		}
		revision := p.Labels[appsv1.ControllerRevisionHashLabelKey]
		if revision == sts.Status.UpdateRevision || (i < partition && revision == sts.Status.CurrentRevision) {
			continue // it would come back as it is
		}
		since := p.CreationTimestamp.Time
		if c := opsutil.PodReadyCondition(p); c != nil {
			if c.Status == corev1.ConditionTrue {
				continue
			}
			since = c.LastTransitionTime.Time
		}
		notReady := s.now.Sub(since)
		if notReady <= deadline {
			continue
		}
		older, err := predates(p)
		if err != nil {
			return nil, 0, err
		}
		if older {
			return p, notReady, nil
		}
	}
	return nil, 0, nil
}
