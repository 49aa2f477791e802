package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Deletion needs no finalizer: a finalizer wedged `kubectl delete -f deploy/rollout-operator.yaml`
// (the operator and its RBAC went at once, so nobody removed it and the CRD stayed Terminating).
// Instead, whenever a PhasedRollout is found gone, the StatefulSets whose ManagedByAnnotation still
// names it are handed back. The StatefulSet watch maps an annotated StatefulSet to the PhasedRollout
// it names, so StatefulSets left behind while the operator was not running (uninstalled, or down
// when the PhasedRollout was deleted) are handed back when it starts again.

// reconcileDelete hands back every StatefulSet of the namespace whose ManagedByAnnotation names the
// PhasedRollout req, which the caller read live from the API server and found gone.
func (r *Reconciler) reconcileDelete(ctx context.Context, req types.NamespacedName) error {
	var list appsv1.StatefulSetList
	if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return fmt.Errorf("listing the StatefulSets of namespace %s: %w", req.Namespace, err)
	}
	for i := range list.Items {
		if list.Items[i].Annotations[rolloutv1alpha1.ManagedByAnnotation] != req.Name {
			continue
		}
		if err := r.handBack(ctx, req, list.Items[i].Name); err != nil {
			return err
		}
	}
	return nil
}

// handBack releases StatefulSet name from PhasedRollout owner, deciding from the StatefulSet alone
// (the PhasedRollout and its status are gone): idle (updateRevision = currentRevision), the
// partition goes to 0 and the normal rolling update resumes; mid-rollout, the partition stays, so no
// pod is released unchecked, and an Event on the StatefulSet says so. The annotation goes in the same
// write, under an optimistic lock: a new PhasedRollout that took the StatefulSet over meanwhile keeps
// it.
func (r *Reconciler) handBack(ctx context.Context, owner types.NamespacedName, name string) error {
	sts := &appsv1.StatefulSet{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: owner.Namespace, Name: name}, sts); err != nil {
		return client.IgnoreNotFound(err)
	}
	if sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] != owner.Name || !sts.DeletionTimestamp.IsZero() {
		return nil // taken over (or released) since the list, or going away with its namespace
	}
	partition := int32(0)
	midRollout := sts.Status.UpdateRevision != sts.Status.CurrentRevision
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; midRollout && ru != nil && ru.Partition != nil {
		partition = *ru.Partition
	}
	orig := sts.DeepCopy()
	delete(sts.Annotations, rolloutv1alpha1.ManagedByAnnotation)
	if sts.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType || sts.Spec.UpdateStrategy.Type == "" {
		if sts.Spec.UpdateStrategy.RollingUpdate == nil {
			sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
		sts.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(partition)
	}
	// A merge patch, not an apply: the hand-back must remove the annotation and set the partition
	// whoever else owns them (an apply only drops what phasedrollout alone owns), under the
	// resourceVersion the decision was taken on. Under the field manager's name all the same, so a
	// GitOps tool told to ignore phasedrollout's fields (docs/gitops.md) sees no drift in it.
	if err := r.Client.Patch(ctx, sts, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(rolloutv1alpha1.FieldManager)); err != nil {
		return fmt.Errorf("handing StatefulSet %s back from PhasedRollout %s: %w", name, owner.Name, err)
	}
	log.FromContext(ctx).Info("handed a StatefulSet back from a PhasedRollout that no longer exists", "statefulSet", name, "partition", partition, "midRollout", midRollout)
	if midRollout {
		r.Recorder.Eventf(sts, nil, corev1.EventTypeWarning, rolloutv1alpha1.EventPartitionLeftOnDeletion, "Release",
			"PhasedRollout %s was deleted mid-rollout; the partition stays at %d so the remaining pods are not rolled unchecked. Set spec.updateStrategy.rollingUpdate.partition yourself to continue", owner.Name, partition)
		return nil
	}
	r.Recorder.Eventf(sts, nil, corev1.EventTypeNormal, rolloutv1alpha1.EventPartitionReleased, "Release",
		"PhasedRollout %s no longer exists; the partition is released (0) and the normal rolling update resumes", owner.Name)
	return nil
}
