package controller

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// getLease reads the lock's Lease from the API server (not from a cache: its resourceVersion is the
// precondition of the next write). It returns nil when there is none.
func (r *Reconciler) getLease(ctx context.Context, lock *leasev1.StatefulSetLock) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: lock.Namespace, Name: lock.Spec.LeaseName}, lease)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Lease %s: %w", lock.Spec.LeaseName, err)
	}
	return lease, nil
}

// ownedBy reports whether the lock controls the Lease. Any other Lease of that name is foreign and
// is never written.
func ownedBy(lease *coordinationv1.Lease, lock *leasev1.StatefulSetLock) bool {
	return metav1.IsControlledBy(lease, lock)
}

// leaseHolder returns the writer the Lease records.
func leaseHolder(lease *coordinationv1.Lease) Holder {
	return Holder{Name: ptr.Deref(lease.Spec.HolderIdentity, ""), UID: types.UID(lease.Annotations[leasev1.WriterUIDAnnotation])}
}

// renewal says when the Lease of a current writer must be renewed next: at half its duration.
func renewal(lease *coordinationv1.Lease, duration time.Duration, now time.Time) (due bool, after time.Duration) {
	if lease.Spec.RenewTime == nil {
		return true, duration / 2
	}
	next := lease.Spec.RenewTime.Add(duration / 2)
	if !now.Before(next) {
		return true, duration / 2
	}
	return false, next.Sub(now)
}

// leaseWrite is the state the Lease must record.
type leaseWrite struct {
	holder      Holder
	transitions int32
	// moved is whether the holder changes (acquireTime is set anew).
	moved bool
}

// writeLease creates the Lease or updates it under the resourceVersion precondition of the copy read
// by getLease: a concurrent writer makes it fail with a conflict instead of being overwritten.
func (r *Reconciler) writeLease(ctx context.Context, lock *leasev1.StatefulSetLock, lease *coordinationv1.Lease, w leaseWrite, now time.Time) (*coordinationv1.Lease, error) {
	create := lease == nil
	if create {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: lock.Spec.LeaseName, Namespace: lock.Namespace,
			Labels: map[string]string{leasev1.LockLabel: lock.Name},
		}}
		if err := controllerutil.SetControllerReference(lock, lease, r.Client.Scheme()); err != nil {
			return nil, err
		}
	}
	stamp := metav1.NewMicroTime(now)
	lease.Spec.HolderIdentity = ptr.To(w.holder.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To(lock.Spec.LeaseDurationSeconds)
	lease.Spec.LeaseTransitions = ptr.To(w.transitions)
	setOrDelete(&lease.Annotations, leasev1.WriterUIDAnnotation, string(w.holder.UID))
	if w.holder.Name == "" {
		lease.Spec.AcquireTime, lease.Spec.RenewTime = nil, nil
	} else {
		if w.moved || lease.Spec.AcquireTime == nil {
			lease.Spec.AcquireTime = &stamp
		}
		lease.Spec.RenewTime = &stamp
	}
	var err error
	if create {
		err = r.Client.Create(ctx, lease)
	} else {
		err = r.Client.Update(ctx, lease)
	}
	if err != nil {
		return nil, fmt.Errorf("writing Lease %s: %w", lock.Spec.LeaseName, err)
	}
	r.writes.Wrote(lease)
	return lease, nil
}

// leaseCurrent reports whether the Lease already records this state and needs no write now.
func leaseCurrent(lease *coordinationv1.Lease, lock *leasev1.StatefulSetLock, w leaseWrite) bool {
	return lease != nil && !w.moved && leaseHolder(lease) == w.holder &&
		ptr.Deref(lease.Spec.LeaseTransitions, 0) == w.transitions &&
		ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) == lock.Spec.LeaseDurationSeconds
}

func setOrDelete(m *map[string]string, key, value string) {
	if value == "" {
		delete(*m, key)
		return
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
}
