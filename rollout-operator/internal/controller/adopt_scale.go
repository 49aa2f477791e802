package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Taking over a StatefulSet whose rollout is already under way (PR-12), and scale-ups during a
// rollout (PR-14): both decide a partition other than the step machine's next one.

// adoptablePartition returns the partition that freezes a rollout the StatefulSet controller has
// already started (PR-12): the lowest index i such that every pod from i to replicas-1 is on the
// update revision (replicas when the top pod is not), never below the partition already set, so that
// adopting never releases a pod.
func (r *Reconciler) adoptablePartition(ctx context.Context, sts *appsv1.StatefulSet, replicas int32, target string) (int32, error) {
	pods, err := r.pods(ctx, sts)
	if err != nil {
		return 0, err
	}
	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	k := replicas
	for i := replicas - 1; i >= 0; i-- {
		p, ok := pods[fmt.Sprintf("%s-%d", sts.Name, start+i)]
		if !ok || p.Labels[appsv1.ControllerRevisionHashLabelKey] != target {
			break
		}
		k = i
	}
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		k = max(k, min(*ru.Partition, replicas))
	}
	return k, nil
}

// scaledUp applies spec.scaleUpDuringRollout to a scale-up seen during a rollout (PR-14): HoldNew
// raises the partition to the new replica count, so ordinals not yet created start at the current
// revision and the step machine walks down again from the top (the partition no longer matches the
// step's, so a new step starts with no passes); Allow leaves the partition.
func (r *Reconciler) scaledUp(ctx context.Context, s *scope, from, to int32) error {
	pr, sts := s.pr, s.sts
	partition := int32(0)
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = *ru.Partition
	}
	policy := pr.Spec.ScaleUpDuringRollout
	if policy == "" {
		policy = rolloutv1alpha1.ScaleUpHoldNew
	}
	rec := &rolloutv1alpha1.ScaleUpRecord{FromReplicas: from, ToReplicas: to, Partition: partition, Policy: policy, HeldAt: partition, Time: metav1.NewTime(s.now)}
	note := fmt.Sprintf("StatefulSet %s scaled from %d to %d replicas during the rollout at partition %d", sts.Name, from, to, partition)
	if policy == rolloutv1alpha1.ScaleUpHoldNew && partition < to {
		if err := r.applyPartition(ctx, pr, sts, to, true); err != nil {
			return err
		}
		rec.HeldAt = to
		note += fmt.Sprintf(" (scaleUpDuringRollout HoldNew): partition raised to %d so the new pods start at revision %s; the rollout walks down again from the top, every step checked", to, sts.Status.CurrentRevision)
	} else {
		note += fmt.Sprintf(" (scaleUpDuringRollout %s): partition kept, the new pods start at revision %s", policy, sts.Status.UpdateRevision)
	}
	pr.Status.LastScaleUp = rec
	s.event(pr, corev1.EventTypeNormal, rolloutv1alpha1.EventScaledDuringRollout, "%s", note)
	log.FromContext(ctx).Info("scale-up during a rollout", "from", from, "to", to, "partition", partition, "policy", policy, "heldAt", rec.HeldAt)
	return nil
}
