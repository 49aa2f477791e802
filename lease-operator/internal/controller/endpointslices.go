package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Operator-written endpoints (spec.services.endpoints: Operator, SL-11): the lock's Services have no
// selector, and the operator writes one EndpointSlice for each, named like the Service. The writer's
// is written in the election's own steps, so that it never holds more than one endpoint and never a pod
// that is not labelled writer:
//
//   - before the demotion (unrouteWriter): emptied when the writer moves, or when it names any other pod;
//   - after the promotion (routeWriter): set to the writer, once it is labelled.
//
// The reader slice follows with the Services (every other pod of the StatefulSet). A slice carries
// endpointslice.kubernetes.io/managed-by: lease-operator.app.anukkrit.me, so kube-controller-manager's
// EndpointSlice controller leaves it alone (and it writes none for a Service without a selector);
// config/policy/endpointslices.yaml admits only such slices of the lock's own Services from the operator.
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch;create;patch;delete

// endpointSliceManagedBy is the slices' endpointslice.kubernetes.io/managed-by value.
var endpointSliceManagedBy = "lease-operator." + leasev1.GroupVersion.Group

// operatorEndpoints reports whether the operator writes the lock's EndpointSlices.
func operatorEndpoints(lock *leasev1.StatefulSetLock) bool {
	return lock.Spec.Services != nil && lock.Spec.Services.Endpoints == leasev1.EndpointsOperator
}

// unrouteWriter empties the writer slice before any pod is demoted, when the writer moves (whatever the
// cache shows: it may not show the slice the previous reconcile wrote yet, as demote's force) or the
// slice names anyone but the writer. An empty slice routes nowhere; a slice that does not exist needs
// nothing.
func (r *Reconciler) unrouteWriter(ctx context.Context, s *scope) error {
	if !operatorEndpoints(s.lock) {
		return nil
	}
	slice, err := r.cachedSlice(ctx, s.lock, s.lock.Name+writerServiceSuffix)
	if err != nil {
		return err
	}
	// The writer stays: the slice is empty or names it, and so does the operator's last write when the
	// cache is behind it (routeWriter names only the pod the Lease was moved to first).
	if !s.leaseWrite.moved && (slice == nil || r.writes.Behind(slice) || !slices.ContainsFunc(slice.Endpoints, func(e discoveryv1.Endpoint) bool {
		return e.TargetRef == nil || e.TargetRef.UID != s.decision.Writer.UID
	})) {
		return nil
	}
	name := s.lock.Name + writerServiceSuffix
	written, err := r.patchSlice(ctx, s.lock.Namespace, name, map[string]any{"endpoints": []any{}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("emptying EndpointSlice %s: %w", name, err)
	}
	r.writes.Wrote(written)
	s.writerUnrouted = true
	return nil
}

// routeWriter sets the writer slice to the writer once it is labelled (none: no endpoint).
func (r *Reconciler) routeWriter(ctx context.Context, s *scope) error {
	if !operatorEndpoints(s.lock) {
		return nil
	}
	var pods []corev1.Pod
	if i := slices.IndexFunc(s.pods, func(p corev1.Pod) bool { return p.UID == s.decision.Writer.UID }); i >= 0 && s.decision.Writer.Name != "" {
		pods = s.pods[i : i+1]
	}
	// Emptied in this reconcile: the cache still shows what was there before.
	return r.applySlice(ctx, s.lock, writerServiceSuffix, pods, s.writerUnrouted)
}

// routeReaders sets the reader slice to every pod of the StatefulSet but the writer.
func (r *Reconciler) routeReaders(ctx context.Context, s *scope) error {
	readers := slices.DeleteFunc(slices.Clone(s.pods), func(p corev1.Pod) bool { return p.UID == s.decision.Writer.UID })
	return r.applySlice(ctx, s.lock, readerServiceSuffix, readers, false)
}

// applySlice makes the slice of the Service <lock><suffix> route to the pods (those without an address
// of the slice's family are left out): created when there is an endpoint to route to, patched when it
// differs from the cache (or force: the cache is known to be behind).
func (r *Reconciler) applySlice(ctx context.Context, lock *leasev1.StatefulSetLock, suffix string, pods []corev1.Pod, force bool) error {
	name := lock.Name + suffix
	got, err := r.cachedSlice(ctx, lock, name)
	if err != nil {
		return err
	}
	if got != nil && !metav1.IsControlledBy(got, lock) {
		return fmt.Errorf("EndpointSlice %s exists and is not owned by this StatefulSetLock; it is left untouched", name)
	}
	addressType := discoveryv1.AddressTypeIPv4
	if got != nil {
		addressType = got.AddressType // immutable
	} else if len(pods) > 0 {
		addressType = podAddressType(&pods[0])
	}
	want := endpointSlice(lock, name, addressType, pods)
	if got == nil {
		if len(want.Endpoints) == 0 {
			return nil // nothing to route to: no slice is no endpoint
		}
		if err := controllerutil.SetControllerReference(lock, want, r.Client.Scheme()); err != nil {
			return err
		}
		err := r.Client.Create(ctx, want)
		if err == nil {
			r.writes.Wrote(want)
			ctrl.LoggerFrom(ctx).Info("Created an EndpointSlice", "endpointSlice", name)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating EndpointSlice %s: %w", name, err)
		}
		// The cache is behind the slice's creation: patch it as below.
	} else if !force && !r.writes.Behind(got) && equality.Semantic.DeepEqual(got.Endpoints, want.Endpoints) &&
		equality.Semantic.DeepEqual(got.Ports, want.Ports) && got.Labels[discoveryv1.LabelManagedBy] == endpointSliceManagedBy &&
		got.Labels[discoveryv1.LabelServiceName] == name && got.Labels[leasev1.LockLabel] == lock.Name {
		return nil
	}
	written, err := r.patchSlice(ctx, lock.Namespace, name, map[string]any{
		"metadata":  map[string]any{"labels": want.Labels},
		"endpoints": want.Endpoints, "ports": want.Ports,
	})
	if err != nil {
		return fmt.Errorf("updating EndpointSlice %s: %w", name, err)
	}
	r.writes.Wrote(written)
	return nil
}

// patchSlice merge-patches the slice: the lists it sets are replaced whole, whatever the cached copy.
// A lock's slices are written by its reconcile only, one at a time.
func (r *Reconciler) patchSlice(ctx context.Context, namespace, name string, patch map[string]any) (*discoveryv1.EndpointSlice, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := r.Client.Patch(ctx, slice, client.RawPatch(types.MergePatchType, body)); err != nil {
		return nil, err
	}
	return slice, nil
}

// cachedSlice returns the slice of that name from the cache, nil when there is none.
func (r *Reconciler) cachedSlice(ctx context.Context, lock *leasev1.StatefulSetLock, name string) (*discoveryv1.EndpointSlice, error) {
	slice := &discoveryv1.EndpointSlice{}
	err := r.Cache.Get(ctx, types.NamespacedName{Namespace: lock.Namespace, Name: name}, slice)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading EndpointSlice %s: %w", name, err)
	}
	return slice, nil
}

// endpointSlice is the slice of the Service name routing to the pods, with the Service's ports (their
// target ports, as the EndpointSlice controller writes them) and the endpoint conditions it would give
// each pod.
func endpointSlice(lock *leasev1.StatefulSetLock, name string, addressType discoveryv1.AddressType, pods []corev1.Pod) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: lock.Namespace, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: endpointSliceManagedBy, leasev1.LockLabel: lock.Name,
		}},
		AddressType: addressType,
		Endpoints:   []discoveryv1.Endpoint{},
		Ports:       []discoveryv1.EndpointPort{},
	}
	for _, p := range servicePorts(lock) {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.TargetPort.IntVal), Protocol: ptr.To(p.Protocol)})
	}
	for i := range pods {
		pod := &pods[i]
		address := podAddress(pod, addressType)
		if address == "" {
			continue // no IP yet (or none of that family)
		}
		ready, terminating := opsutil.PodReady(pod), !pod.DeletionTimestamp.IsZero()
		endpoint := discoveryv1.Endpoint{
			Addresses:  []string{address},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready && !terminating), Serving: ptr.To(ready), Terminating: ptr.To(terminating)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		}
		if pod.Spec.NodeName != "" {
			endpoint.NodeName = ptr.To(pod.Spec.NodeName)
		}
		slice.Endpoints = append(slice.Endpoints, endpoint)
	}
	slices.SortFunc(slice.Endpoints, func(a, b discoveryv1.Endpoint) int { return cmp.Compare(a.TargetRef.Name, b.TargetRef.Name) })
	return slice
}

// podAddressType is the family of the pod's primary IP: a Service is single-stack in the cluster's
// primary family, which is the pods' primary one.
func podAddressType(pod *corev1.Pod) discoveryv1.AddressType {
	if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil && ip.Is6() {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// podAddress returns the pod's IP of that family, "" when it has none.
func podAddress(pod *corev1.Pod, family discoveryv1.AddressType) string {
	ips := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is6() == (family == discoveryv1.AddressTypeIPv6) {
			return s
		}
	}
	return ""
}

// reconcileSlices writes the reader slice, or deletes the lock's slices when it no longer writes them
// (spec.services removed, or endpoints no longer Operator).
func (r *Reconciler) reconcileSlices(ctx context.Context, s *scope) error {
	if operatorEndpoints(s.lock) {
		return r.routeReaders(ctx, s)
	}
	return r.deleteSlices(ctx, s.lock)
}

// deleteSlices deletes the lock's slices.
func (r *Reconciler) deleteSlices(ctx context.Context, lock *leasev1.StatefulSetLock) error {
	var have discoveryv1.EndpointSliceList
	if err := r.Cache.List(ctx, &have, client.InNamespace(lock.Namespace), client.MatchingLabels{leasev1.LockLabel: lock.Name}); err != nil {
		return fmt.Errorf("listing the EndpointSlices of the lock: %w", err)
	}
	for i := range have.Items {
		if metav1.IsControlledBy(&have.Items[i], lock) {
			if err := r.deleteSlice(ctx, &have.Items[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteGoneSlices deletes the slices of a lock that no longer exists, read live, before its pods lose
// their labels: the writer slice never names a pod that is not labelled writer.
func (r *Reconciler) deleteGoneSlices(ctx context.Context, key types.NamespacedName) error {
	var have discoveryv1.EndpointSliceList
	if err := r.APIReader.List(ctx, &have, client.InNamespace(key.Namespace), client.MatchingLabels{leasev1.LockLabel: key.Name}); err != nil {
		return fmt.Errorf("listing the EndpointSlices of deleted StatefulSetLock %s: %w", key.Name, err)
	}
	for i := range have.Items {
		if controlledByLockNamed(&have.Items[i], key.Name) {
			if err := r.deleteSlice(ctx, &have.Items[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteSlice deletes a slice of the lock under a UID precondition.
func (r *Reconciler) deleteSlice(ctx context.Context, slice *discoveryv1.EndpointSlice) error {
	uid := slice.UID
	if err := r.Client.Delete(ctx, slice, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting EndpointSlice %s: %w", slice.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted an EndpointSlice", "endpointSlice", slice.Name)
	return nil
}
