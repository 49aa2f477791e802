package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Stuck pods (updateNotReady, ES-07). Within a version, a configuration roll changes the StatefulSet's
// pod template, and the StatefulSet controller replaces the pods one at a time; but it never replaces a
// pod that is not Ready on the old revision: it waits for that pod to become Ready first, which a pod
// crash-looping on the old template never does (kubernetes/kubernetes#67250). With
// spec.updateStrategy.updateNotReady the operator deletes such a pod, so that the StatefulSet controller
// recreates it from the new template, as quarks' CleanupNonReadyPod did.

// With updateNotReady, during a roll with a pod not Ready: the update revision's ControllerRevision, to
// tell the pods created before it (read uncached, by name).
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get

// stuckPodPoll is how often a version whose roll has a pod that is not Ready is looked at again: pods
// are not watched, and a stuck pod changes nothing in its StatefulSet's status.
const stuckPodPoll = 10 * time.Second

// recreateStuckPod deletes, when updateNotReady is set and the version's StatefulSet is rolling (some
// of its pods are not on the update revision, which includes a template reverted to the current
// revision while a pod of the reverted-from revision is stuck) and not all its pods are Ready, one pod
// that is not Ready, runs a revision other than the update revision and predates the update revision
// (opsutil.PodPredatesRevision): the highest ordinal of them, as the StatefulSet controller rolls from
// the top. At most one at a time: nothing is deleted while a pod of the version is terminating.
func (r *Reconciler) recreateStuckPod(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope, v *version) error {
	st := v.sts.Status
	if !ests.Spec.UpdateStrategy.UpdateNotReady || v.stale() || !v.sts.DeletionTimestamp.IsZero() ||
		st.ObservedGeneration < v.sts.Generation || st.UpdateRevision == "" ||
		st.UpdatedReplicas >= v.specReplicas() || st.ReadyReplicas >= v.specReplicas() {
		return nil // no roll under way, or every pod Ready: the StatefulSet controller goes on alone
	}
	zs.requeueAfter = minPositive(zs.requeueAfter, stuckPodPoll)
	pods, err := r.versionPods(ctx, v)
	if err != nil {
		return err
	}
	rev := &appsv1.ControllerRevision{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: v.sts.Namespace, Name: st.UpdateRevision}, rev); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // cannot tell which pods predate the update revision
		}
		return fmt.Errorf("reading ControllerRevision %s: %w", st.UpdateRevision, err)
	}
	var p *corev1.Pod
	for _, c := range stuckCandidates(v.sts, pods, partition(v.sts)) {
		older, err := opsutil.PodPredatesRevision(ctx, r.APIReader, c, rev)
		if err != nil {
			return err
		}
		if older {
			p = c
			break
		}
	}
	if p == nil {
		return nil
	}
	if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone or replaced meanwhile
		}
		return fmt.Errorf("deleting stuck pod %s: %w", p.Name, err)
	}
	revision := p.Labels[appsv1.ControllerRevisionHashLabelKey]
	ctrl.LoggerFrom(ctx).Info("deleted a stuck pod", "pod", p.Name, "revision", revision, "updateRevision", st.UpdateRevision)
	r.event(ests, p, corev1.EventTypeWarning, extendedv1alpha1.EventStuckPodRecreated, "Delete",
		"Pod %s is not Ready on revision %s, older than StatefulSet %s's update revision %s (updateNotReady): deleted so that it is recreated from the new template",
		p.Name, revision, v.sts.Name, st.UpdateRevision)
	return nil
}

// stuckCandidates returns the pods recreateStuckPod may delete if they predate the update revision,
// highest ordinal first: none while a pod of the StatefulSet is terminating; else the pods the
// StatefulSet controls that are not Ready and are not on the update revision, at or above the partition
// (in place, inplace.go: below it a recreated pod would come back on the old revision, and the
// StatefulSet controller does not wait for it).
func stuckCandidates(sts *appsv1.StatefulSet, pods []corev1.Pod, partition int32) []*corev1.Pod {
	var found []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if owner := metav1.GetControllerOf(p); owner == nil || owner.UID != sts.UID {
			continue
		}
		if !p.DeletionTimestamp.IsZero() {
			return nil // one at a time
		}
		if podOrdinal(sts.Name, p.Name) < int(partition) || opsutil.PodReady(p) ||
			p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
			continue
		}
		found = append(found, p)
	}
	slices.SortFunc(found, func(a, b *corev1.Pod) int { return podOrdinal(sts.Name, b.Name) - podOrdinal(sts.Name, a.Name) })
	return found
}

// podOrdinal is the ordinal of a StatefulSet's pod, from its name (<statefulset>-<ordinal>); 0 when the
// name is not one.
func podOrdinal(sts, pod string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(pod, sts+"-"))
	if err != nil {
		return 0
	}
	return n
}
