package controller

import (
	"context"
	"fmt"
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

// recreateStuckPod deletes, when updateNotReady is set and the version's StatefulSet is rolling (its
// update revision differs from its current one), one pod that is not Ready, runs a revision other than
// the update revision and was created before the update revision: the highest ordinal of them, as the
// StatefulSet controller rolls from the top. At most one at a time: nothing is deleted while a pod of
// the version is terminating.
func (r *Reconciler) recreateStuckPod(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet, zs *zoneScope, v *version) error {
	st := v.sts.Status
	if !ests.Spec.UpdateStrategy.UpdateNotReady || v.stale() || !v.sts.DeletionTimestamp.IsZero() ||
		st.ObservedGeneration < v.sts.Generation || st.UpdateRevision == "" || st.UpdateRevision == st.CurrentRevision ||
		st.ReadyReplicas >= v.specReplicas() {
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
	p := stuckPod(v.sts, pods, rev.CreationTimestamp)
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

// stuckPod returns the pod recreateStuckPod deletes, or nil: none while a pod of the StatefulSet is
// terminating; else the highest-ordinal pod the StatefulSet controls that is not Ready, is not on the
// update revision and was created before it.
func stuckPod(sts *appsv1.StatefulSet, pods []corev1.Pod, revisionCreated metav1.Time) *corev1.Pod {
	var found *corev1.Pod
	best := -1
	for i := range pods {
		p := &pods[i]
		if owner := metav1.GetControllerOf(p); owner == nil || owner.UID != sts.UID {
			continue
		}
		if !p.DeletionTimestamp.IsZero() {
			return nil // one at a time
		}
		if opsutil.PodReady(p) || p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision ||
			!p.CreationTimestamp.Before(&revisionCreated) {
			continue
		}
		if n := podOrdinal(sts.Name, p.Name); n > best {
			found, best = p, n
		}
	}
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
