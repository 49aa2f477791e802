package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Zone outages. A zone of spec.az.zones none of whose nodes is Ready (all NotReady, or none labelled
// with it) cannot run its pods; the status says so (condition ZonesAvailable=False, reason ZoneOutage,
// status.zones[].readyNodes 0) and a Warning Event names the zones when it starts. Nodes are watched,
// but only their readiness and labels wake a reconcile (a node's status changes every heartbeat).

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// zoneNodes counts the Ready nodes of each zone (nil without zones).
func (r *Reconciler) zoneNodes(ctx context.Context, zones []zone) (map[string]int32, error) {
	if len(zones) == 0 || !zones[0].zoned() {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := r.Cache.List(ctx, &nodes, client.HasLabels{zones[0].nodeLabel}); err != nil {
		return nil, fmt.Errorf("listing the nodes of the zones: %w", err)
	}
	out := make(map[string]int32, len(zones))
	for _, z := range zones {
		out[z.name] = 0
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if z, ok := out[n.Labels[zones[0].nodeLabel]]; ok && opsutil.NodeReady(n) && n.DeletionTimestamp.IsZero() {
			out[n.Labels[zones[0].nodeLabel]] = z + 1
		}
	}
	return out, nil
}

// applyZonesAvailable sets condition ZonesAvailable (with zones only) and records an Event when a zone
// outage starts or changes, and when it ends.
func (r *Reconciler) applyZonesAvailable(ests *extendedv1alpha1.ExtendedStatefulSet, s *scope, set func(string, bool, string, string)) {
	if len(s.zones) == 0 {
		meta.RemoveStatusCondition(&ests.Status.Conditions, extendedv1alpha1.ConditionZonesAvailable)
		return
	}
	if s.readyNodes == nil {
		return // not counted (the reconcile failed before): keep what the status says
	}
	var down []string
	for _, z := range s.zones {
		if s.readyNodes[z.zone.name] == 0 {
			down = append(down, fmt.Sprintf("%q", z.zone.name))
		}
	}
	zonesWithoutReadyNode.WithLabelValues(ests.Namespace, ests.Name).Set(float64(len(down)))
	before := meta.FindStatusCondition(ests.Status.Conditions, extendedv1alpha1.ConditionZonesAvailable)
	if len(down) == 0 {
		if before != nil && before.Reason == extendedv1alpha1.ReasonZoneOutage {
			r.event(ests, nil, corev1.EventTypeNormal, extendedv1alpha1.EventZonesAvailable, "ZoneOutage",
				"Every zone has a Ready node again")
		}
		set(extendedv1alpha1.ConditionZonesAvailable, true, extendedv1alpha1.ReasonReconciled,
			fmt.Sprintf("all %d zones have a Ready node", len(s.zones)))
		return
	}
	msg := fmt.Sprintf("zone outage: no Ready node (label %s) in zone %s; their pods cannot run",
		s.zones[0].zone.nodeLabel, strings.Join(down, ", "))
	if before == nil || before.Message != msg {
		r.event(ests, nil, corev1.EventTypeWarning, extendedv1alpha1.EventZoneOutage, "ZoneOutage", "%s", msg)
	}
	set(extendedv1alpha1.ConditionZonesAvailable, false, extendedv1alpha1.ReasonZoneOutage, msg)
}

// nodeZoneChanged passes node creations and deletions, and updates that change readiness or labels.
func nodeZoneChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return opsutil.NodeReady(o) != opsutil.NodeReady(n) || !maps.Equal(o.Labels, n.Labels) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// zoneReferrers maps a node to the ExtendedStatefulSets that list its zone.
func (r *Reconciler) zoneReferrers(ctx context.Context, o client.Object) []reconcile.Request {
	var list extendedv1alpha1.ExtendedStatefulSetList
	if err := r.Cache.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ExtendedStatefulSets for a node", "node", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		e := &list.Items[i]
		if e.Spec.AZ == nil || len(e.Spec.AZ.Zones) == 0 {
			continue
		}
		label := e.Spec.AZ.NodeLabel
		if label == "" {
			label = extendedv1alpha1.DefaultZoneNodeLabel
		}
		if zone, ok := o.GetLabels()[label]; ok && slices.Contains(e.Spec.AZ.Zones, zone) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e)})
		}
	}
	return out
}
