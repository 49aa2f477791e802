package controllerutil

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodPredatesRevision reports whether a StatefulSet's pod runs a revision that was the update revision
// before update became it: the template changed since the pod's revision was made, so recreating the
// pod changes it. It compares the ControllerRevisions' revision numbers, not creation times: when a
// template is reverted to an earlier one, the StatefulSet controller reuses that revision's
// ControllerRevision and raises its number, keeping its old creation time, so a pod of the reverted-
// from (bad) revision is newer than the update revision's ControllerRevision yet predates the revert.
// A pod on the update revision never predates it. When the pod's ControllerRevision is gone (history
// pruned), the pod's creation time against update's stands in.
func PodPredatesRevision(ctx context.Context, r client.Reader, pod *corev1.Pod, update *appsv1.ControllerRevision) (bool, error) {
	name := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
	switch name {
	case update.Name:
		return false, nil
	case "":
		return pod.CreationTimestamp.Before(&update.CreationTimestamp), nil
	}
	own := &appsv1.ControllerRevision{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, own); err != nil {
		if apierrors.IsNotFound(err) {
			return pod.CreationTimestamp.Before(&update.CreationTimestamp), nil
		}
		return false, fmt.Errorf("reading ControllerRevision %s of pod %s: %w", name, pod.Name, err)
	}
	return own.Revision < update.Revision, nil
}
