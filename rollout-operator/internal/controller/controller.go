// Package controller is the PhasedRollout controller of rollout-operator: it rolls a StatefulSet to a
// new revision one pod at a time by owning spec.updateStrategy.rollingUpdate.partition (server-side
// apply, field manager "phasedrollout"), and moves the partition by one only after the step's
// Prometheus checks passed successThreshold times in a row.
//
// Safety: the PhasedRollout and the StatefulSet are read from the API server (not a cache) at every
// reconcile, the step's counters are reported in the PhasedRollout's status (written with a
// resourceVersion precondition) but the passes in a row that move the partition are counted in memory
// by the process that saw them (streak.go): a lost status write cannot resume a broken streak, and a
// restarted or new leader re-earns the streak (each step needs successThreshold fresh passes after a
// restart). A step belongs to the partition value it was started at: if the StatefulSet's
// partition differs from the step recorded in the status (the operator died between writing the
// partition and the status), a new step starts with no passes. The partition is written as an
// absolute value, so replaying a write never moves it twice. A check that cannot be evaluated is a
// failed check.
//
// Files: setup.go (options, flags, watches), reconcile.go (the Reconcile shape and its scope),
// revisions.go (the decisions on the StatefulSet's revisions), step.go (the step machine), query.go
// (a step's check query), controller.go (the partition and the pods), adopt_scale.go (adopting a
// rollout under way, scale-ups during a rollout), delete.go (deletion), status.go (conditions),
// secretaccess.go (per-namespace Secret access through RoleBindings), prometheus.go (the Prometheus
// client), webhook.go (webhook gates), checks.go and verdict.go (several checks per step, CEL
// verdicts), control.go (pause, promote, abort, the dry run, the Available condition), batches.go
// (steps in batches), stuckpods.go (stuck-pod recovery), writer.go (a StatefulSetLock's writer moved
// before its pod is rolled), streak.go (the in-memory passes in a row), metrics.go.
package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

const (
	indexTarget = "spec.targetRef" // PhasedRollout → the StatefulSet it manages
	// pollWhileWaiting bounds how long a step waits for pods without an event (watches usually
	// trigger sooner).
	pollWhileWaiting = 5 * time.Second
)

// Reconciler reconciles PhasedRollouts.
type Reconciler struct {
	// Client writes StatefulSets and PhasedRollout status.
	Client client.Client
	// APIReader reads PhasedRollouts, StatefulSets, pods and Secrets from the API server, so that a
	// decision to move the partition is never taken on a stale cache.
	APIReader client.Reader
	// Recorder records events.k8s.io Events.
	Recorder events.EventRecorder
	// Checker runs the Prometheus checks.
	Checker Checker
	// QueryTimeout bounds one check.
	QueryTimeout time.Duration
	// SecretAccess grants the operator read access to Secrets in a namespace before it reads one.
	SecretAccess *SecretAccess
	// SwitchoverTimeout bounds the wait for a StatefulSetLock to move its writer (writer.go).
	SwitchoverTimeout time.Duration
	// streaks are the passes in a row that gate each partition move, counted by this process
	// (streak.go).
	streaks streaks
}

// podsAllOn reports whether every pod of the StatefulSet is on revision rev (a rollout that ended
// outside the operator's sight, e.g. a revert to the current revision).
func (r *Reconciler) podsAllOn(ctx context.Context, sts *appsv1.StatefulSet, rev string) bool {
	pods, err := r.pods(ctx, sts)
	if err != nil {
		return false
	}
	for _, p := range pods {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev {
			return false
		}
	}
	return true
}

// pods returns the StatefulSet's pods by name.
func (r *Reconciler) pods(ctx context.Context, sts *appsv1.StatefulSet) (map[string]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("StatefulSet %s has an invalid selector: %w", sts.Name, err)
	}
	var list corev1.PodList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(sts.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing the pods of StatefulSet %s: %w", sts.Name, err)
	}
	pods := make(map[string]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == sts.UID {
			pods[p.Name] = p
		}
	}
	return pods, nil
}

// available reports whether the pod is Ready since at least minReady and not being deleted.
func available(p *corev1.Pod, minReady time.Duration, now time.Time) bool {
	if !p.DeletionTimestamp.IsZero() {
		return false
	}
	c := opsutil.PodReadyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue && (minReady == 0 || !c.LastTransitionTime.Add(minReady).After(now))
}

// partitionHeld reports whether the StatefulSet already has the partition and names pr as its manager.
func partitionHeld(sts *appsv1.StatefulSet, pr *rolloutv1alpha1.PhasedRollout, partition int32) bool {
	ru := sts.Spec.UpdateStrategy.RollingUpdate
	return ru != nil && ru.Partition != nil && *ru.Partition == partition && sts.Annotations[rolloutv1alpha1.ManagedByAnnotation] == pr.Name
}

// applyPartition server-side applies the partition (and the managed-by annotation when annotate)
// under the operator's field manager, forcing ownership of these two fields only.
func (r *Reconciler) applyPartition(ctx context.Context, pr *rolloutv1alpha1.PhasedRollout, sts *appsv1.StatefulSet, partition int32, annotate bool) error {
	ac := appsv1ac.StatefulSet(sts.Name, sts.Namespace).
		WithUID(sts.UID).
		WithSpec(appsv1ac.StatefulSetSpec().WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
			WithRollingUpdate(appsv1ac.RollingUpdateStatefulSetStrategy().WithPartition(partition))))
	if annotate {
		ac.WithAnnotations(map[string]string{rolloutv1alpha1.ManagedByAnnotation: pr.Name})
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(rolloutv1alpha1.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("setting the partition of StatefulSet %s to %d: %w", sts.Name, partition, err)
	}
	if sts.Spec.UpdateStrategy.RollingUpdate == nil {
		sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
	}
	sts.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(partition)
	return nil
}
