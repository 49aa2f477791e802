package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// Writer and reader Services (spec.services, SL-11): <lock>-rw selects the pod labelled writer by the
// lock, <lock>-ro the pods labelled reader; both are ClusterIP Services the lock controls. They select
// on the role labels the election writes, so routing moves in the same API write as the label; with
// spec.services.endpoints: Operator they select nothing and the operator writes their EndpointSlices
// (endpointslices.go). The admission policy config/policy/services.yaml admits only such Services from
// the operator.
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;delete

// Service name suffixes.
const (
	writerServiceSuffix = "-rw"
	readerServiceSuffix = "-ro"
)

// desiredServices returns the Services spec.services asks for (none when unset).
func desiredServices(lock *leasev1.StatefulSetLock) []*corev1.Service {
	if lock.Spec.Services == nil {
		return nil
	}
	out := make([]*corev1.Service, 0, 2)
	for suffix, role := range map[string]string{writerServiceSuffix: leasev1.RoleWriter, readerServiceSuffix: leasev1.RoleReader} {
		var selector map[string]string // none with endpoints: Operator, which writes their EndpointSlices
		if !operatorEndpoints(lock) {
			selector = map[string]string{leasev1.LockLabel: lock.Name, leasev1.RoleLabel: role}
		}
		out = append(out, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: lock.Name + suffix, Namespace: lock.Namespace, Labels: map[string]string{leasev1.LockLabel: lock.Name}},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: selector,
				Ports:    servicePorts(lock),
			},
		})
	}
	slices.SortFunc(out, func(a, b *corev1.Service) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// servicePorts are the ports of the lock's Services.
func servicePorts(lock *leasev1.StatefulSetLock) []corev1.ServicePort {
	var ports []corev1.ServicePort
	for _, p := range lock.Spec.Services.Ports {
		target := p.TargetPort
		if target == 0 {
			target = p.Port
		}
		ports = append(ports, corev1.ServicePort{Name: p.Name, Port: p.Port, TargetPort: intstr.FromInt32(target), Protocol: corev1.ProtocolTCP})
	}
	return ports
}

// reconcileServices makes the lock's Services what spec.services asks for: created, corrected (selector,
// ports, type), or deleted when the field is gone. A Service of that name the lock does not control is
// left alone and reported as an error.
func (r *Reconciler) reconcileServices(ctx context.Context, lock *leasev1.StatefulSetLock) error {
	want := desiredServices(lock)
	for _, svc := range want {
		if err := r.applyService(ctx, lock, svc); err != nil {
			return err
		}
	}
	var have corev1.ServiceList
	if err := r.Cache.List(ctx, &have, client.InNamespace(lock.Namespace), client.MatchingLabels{leasev1.LockLabel: lock.Name}); err != nil {
		return fmt.Errorf("listing the Services of the lock: %w", err)
	}
	for i := range have.Items {
		svc := &have.Items[i]
		if !metav1.IsControlledBy(svc, lock) || slices.ContainsFunc(want, func(w *corev1.Service) bool { return w.Name == svc.Name }) {
			continue
		}
		if err := r.deleteService(ctx, svc); err != nil {
			return err
		}
	}
	return nil
}

// applyService creates the Service, or updates the fields the lock sets when they differ.
func (r *Reconciler) applyService(ctx context.Context, lock *leasev1.StatefulSetLock, want *corev1.Service) error {
	got := &corev1.Service{}
	err := r.Cache.Get(ctx, client.ObjectKeyFromObject(want), got)
	if apierrors.IsNotFound(err) {
		return r.createService(ctx, lock, want)
	}
	if err != nil {
		return fmt.Errorf("reading Service %s: %w", want.Name, err)
	}
	if !metav1.IsControlledBy(got, lock) {
		return fmt.Errorf("Service %s exists and is not owned by this StatefulSetLock; it is left untouched", want.Name)
	}
	if (len(got.Spec.Selector) == 0) != (len(want.Spec.Selector) == 0) {
		// Who fills the endpoints changes (spec.services.endpoints): a new Service. Removing the selector
		// of the old one may leave kube-controller-manager's EndpointSlices of it in place (its
		// controller returns early for a Service without a selector); those of a deleted Service go with
		// it (the garbage collector). The operator's own go in reconcileSlices.
		if err := r.deleteService(ctx, got); err != nil {
			return err
		}
		return r.createService(ctx, lock, want)
	}
	if got.Spec.Type == want.Spec.Type && maps.Equal(got.Spec.Selector, want.Spec.Selector) && samePorts(got.Spec.Ports, want.Spec.Ports) &&
		got.Labels[leasev1.LockLabel] == lock.Name {
		return nil
	}
	updated := got.DeepCopy()
	updated.Spec.Type, updated.Spec.Selector, updated.Spec.Ports = want.Spec.Type, want.Spec.Selector, want.Spec.Ports
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	updated.Labels[leasev1.LockLabel] = lock.Name
	if err := r.Client.Update(ctx, updated); err != nil {
		return fmt.Errorf("updating Service %s: %w", want.Name, err)
	}
	r.writes.Wrote(updated)
	return nil
}

// createService creates the Service, controlled by the lock.
func (r *Reconciler) createService(ctx context.Context, lock *leasev1.StatefulSetLock, want *corev1.Service) error {
	if err := controllerutil.SetControllerReference(lock, want, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service %s: %w", want.Name, err)
	}
	r.writes.Wrote(want)
	ctrl.LoggerFrom(ctx).Info("Created a Service", "service", want.Name)
	return nil
}

// samePorts compares the fields of the ports the lock sets.
func samePorts(a, b []corev1.ServicePort) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.ServicePort) bool {
		return x.Name == y.Name && x.Port == y.Port && x.TargetPort == y.TargetPort && x.Protocol == y.Protocol
	})
}

// deleteService deletes a Service of the lock under a UID precondition.
func (r *Reconciler) deleteService(ctx context.Context, svc *corev1.Service) error {
	uid := svc.UID
	if err := r.Client.Delete(ctx, svc, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Service %s: %w", svc.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted a Service", "service", svc.Name)
	return nil
}

// deleteGoneServices deletes the Services of a lock that no longer exists (the garbage collector does
// too; this makes it prompt, and covers clusters where it lags), read live.
func (r *Reconciler) deleteGoneServices(ctx context.Context, key types.NamespacedName) error {
	var svcs corev1.ServiceList
	if err := r.APIReader.List(ctx, &svcs, client.InNamespace(key.Namespace), client.MatchingLabels{leasev1.LockLabel: key.Name}); err != nil {
		return fmt.Errorf("listing the Services of deleted StatefulSetLock %s: %w", key.Name, err)
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if !controlledByLockNamed(svc, key.Name) {
			continue
		}
		if err := r.deleteService(ctx, svc); err != nil {
			return err
		}
	}
	return nil
}

// controlledByLockNamed reports whether a StatefulSetLock of that name is the object's controller (a
// lock that no longer exists: its UID is not known any more).
func controlledByLockNamed(obj metav1.Object, name string) bool {
	owner := metav1.GetControllerOf(obj)
	return owner != nil && owner.Kind == "StatefulSetLock" && owner.Name == name
}
