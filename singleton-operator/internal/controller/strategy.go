package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// auditStrategy reports (singletonv1.ConditionStrategyAdvice) a Deployment whose strategy makes the
// handovers of a Wrapper singleton slower than they need be: with Recreate, or RollingUpdate with a
// maxSurge of 0, the Deployment creates the new pod only once the old one is gone, so the new pod's whole
// start (sandbox, sidecar, app container) is in the gap; with a surge the new pod is created, started and
// held beside the old one, and the operator stops the old pod once the new one runs, so the gap is the
// old pod's stop and the grant. Not reported: SchedulingGate singletons (their gap includes the whole
// start either way) and pod templates with a PersistentVolumeClaim volume (a ReadWriteOnce claim needs
// Recreate: the new pod may land on a node the volume cannot attach to, and the operator cannot read the
// claim's access mode). A Deployment the caches do not show (yet) changes nothing.
func (r *Reconciler) auditStrategy(ctx context.Context, s *scope) {
	advice := ""
	if s.ss.Spec.HoldMode != singletonv1.HoldModeSchedulingGate {
		if d := r.deploymentOf(ctx, s.pods); d != nil {
			advice = strategyAdvice(d)
		}
	}
	if advice == "" {
		meta.RemoveStatusCondition(&s.status.Conditions, singletonv1.ConditionStrategyAdvice)
		return
	}
	setCondition(s.status, s.ss, singletonv1.ConditionStrategyAdvice, metav1.ConditionTrue, singletonv1.ReasonSlowHandoverStrategy, advice)
}

// deploymentOf returns the Deployment of the singleton's pods (the candidate's, else the active pod's,
// else any pod's), through its ReplicaSet, from the namespace's ranking cache; nil if there is none.
func (r *Reconciler) deploymentOf(ctx context.Context, pods *classifiedPods) *appsv1.Deployment {
	var pod *corev1.Pod
	switch {
	case pods.candidate != nil:
		pod = pods.candidate
	case len(pods.active) > 0:
		pod = pods.active[0]
	case len(pods.all) > 0:
		pod = pods.all[0]
	default:
		return nil
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "ReplicaSet" {
		return nil
	}
	nsCache, err := r.caches.reader(ctx, pod.Namespace)
	if err != nil {
		return nil
	}
	rs := revisionMeta()
	if err := nsCache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, rs); err != nil {
		return nil
	}
	owner = metav1.GetControllerOf(rs)
	if owner == nil || owner.Kind != "Deployment" {
		return nil
	}
	d := &appsv1.Deployment{}
	if err := nsCache.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, d); err != nil {
		return nil
	}
	return d
}

// strategyAdvice is the advice for a Deployment whose strategy creates the new pod only after the old
// one is gone, or "" when its strategy is the faster one (or a claim volume needs Recreate).
func strategyAdvice(d *appsv1.Deployment) string {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return ""
		}
	}
	const faster = "set strategy RollingUpdate with maxSurge 1 and maxUnavailable 0: the new pod is then created, started and held beside the old one, and the handover waits only for the old pod's stop"
	switch d.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		return fmt.Sprintf("Deployment %s uses the Recreate strategy: its new pod is created only after the old one is gone, so the whole pod start is in the handover gap; %s", d.Name, faster)
	case appsv1.RollingUpdateDeploymentStrategyType, "":
		surge := intstr.FromString("25%") // the API server's default
		if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
			surge = *ru.MaxSurge
		}
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		n, err := intstr.GetScaledValueFromIntOrPercent(&surge, int(replicas), true)
		if err == nil && n == 0 {
			return fmt.Sprintf("Deployment %s uses RollingUpdate with maxSurge %s: its new pod is created only after the old one is gone, so the whole pod start is in the handover gap; %s", d.Name, surge.String(), faster)
		}
	}
	return ""
}
