package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Ownership. Only pods whose controller reference names this StatefulCluster (by UID) are counted,
// retired or deleted. An orphan (no controller) that matches the selector is adopted: it gets the
// controller reference, and the identity and revision labels it lacks, in one patch under a
// resourceVersion precondition, so a pod someone else adopted meanwhile is left alone. An adopted pod
// keeps its name as its identity (nothing is recreated, as a migrating user expects). A pod owned by
// another controller is never touched.

func (s *scope) adopt(ctx context.Context, pod *corev1.Pod) error {
	orig := pod.DeepCopy()
	pod.OwnerReferences = append(pod.OwnerReferences, *controllerRef(s.sc))
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[clusterv1alpha1.ClusterNameLabel] = s.sc.Name
	if pod.Labels[clusterv1alpha1.IdentityLabel] == "" {
		pod.Labels[clusterv1alpha1.IdentityLabel] = pod.Name
	}
	if pod.Labels[clusterv1alpha1.RevisionLabel] == "" {
		// Its template is unknown: it counts as the current revision, so adopting does not start an update.
		pod.Labels[clusterv1alpha1.RevisionLabel] = s.revs.current.Name
	}
	if err := s.r.Client.Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Adopted pod", "pod", pod.Name)
	s.r.Recorder.Eventf(s.sc, pod, corev1.EventTypeNormal, clusterv1alpha1.EventAdopted, "Adopt", "Adopted orphan pod %s", pod.Name)
	return nil
}
