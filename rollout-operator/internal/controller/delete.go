package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// reconcileDelete hands the StatefulSet back when the PhasedRollout is deleted: when idle the
// partition goes to 0 (the normal rolling update resumes); mid-rollout the partition stays, so no pod
// is released unchecked, and an Event on the StatefulSet says so. Then the finalizer goes; the status
// is not written.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) error {
	pr := s.pr
	if !controllerutil.ContainsFinalizer(pr, rolloutv1alpha1.Finalizer) {
		return nil
	}
	sts := &appsv1.StatefulSet{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Spec.TargetRef}, sts)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s: %w", pr.Spec.TargetRef, err)
	case sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] != pr.Name:
		// Never managed by this PhasedRollout: nothing to hand back.
	default:
		midRollout := sts.Status.UpdateRevision != sts.Status.CurrentRevision ||
			pr.Status.Phase == rolloutv1alpha1.PhaseRolling || pr.Status.Phase == rolloutv1alpha1.PhaseVerifying || pr.Status.Phase == rolloutv1alpha1.PhaseFailed
		partition := int32(0)
		if midRollout {
			if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
				partition = *ru.Partition
			}
		}
		if skipCheck(pr) {
			partition = 0
			midRollout = false
		}
		if err := r.applyPartition(ctx, pr, sts, partition, false); err != nil {
			return err
		}
		if midRollout {
			r.Recorder.Eventf(sts, nil, corev1.EventTypeWarning, rolloutv1alpha1.EventPartitionLeftOnDeletion, "Release",
				"PhasedRollout %s was deleted mid-rollout; the partition stays at %d so the remaining pods are not rolled unchecked. Set spec.updateStrategy.rollingUpdate.partition yourself to continue", pr.Name, partition)
		}
	}
	_, err = opsutil.RemoveFinalizer(ctx, r.Client, pr, rolloutv1alpha1.Finalizer)
	return err
}
