package controllerutil

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PatchOption tunes PatchStatus.
type PatchOption func(*patchOptions)

type patchOptions struct {
	optimisticLock, ignoreNotFound, force bool
}

// WithOptimisticLock sends orig's resourceVersion with the patch, so it fails with a Conflict when the
// object changed since it was read: use it when a decision written to the status depends on the state
// read (a high-water mark, a counter), never when it only mirrors what was observed.
func WithOptimisticLock() PatchOption { return func(o *patchOptions) { o.optimisticLock = true } }

// IgnoreNotFound treats an object deleted meanwhile as written.
func IgnoreNotFound() PatchOption { return func(o *patchOptions) { o.ignoreNotFound = true } }

// Force writes even when the status did not change (with WithOptimisticLock: to fail when the object
// changed since it was read).
func Force(force bool) PatchOption { return func(o *patchOptions) { o.force = force } }

// PatchStatus writes obj's status subresource with a merge patch against orig when obj.Status differs
// (semantically) from orig.Status, and reports whether it wrote. obj and orig are pointers to the same
// kind, which has a Status field; on success obj holds what the API server returned.
func PatchStatus(ctx context.Context, c client.Client, obj, orig client.Object, opts ...PatchOption) (bool, error) {
	var o patchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !o.force && equality.Semantic.DeepEqual(statusOf(obj), statusOf(orig)) {
		return false, nil
	}
	patch := client.MergeFrom(orig)
	if o.optimisticLock {
		patch = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	}
	err := c.Status().Patch(ctx, obj, patch)
	if o.ignoreNotFound {
		err = client.IgnoreNotFound(err)
	}
	if err != nil {
		return false, fmt.Errorf("writing the status: %w", err)
	}
	return true, nil
}

// statusOf returns the Status field of a pointer to a struct; it panics for a kind without one, a
// programming error.
func statusOf(obj client.Object) any {
	f := reflect.ValueOf(obj).Elem().FieldByName("Status")
	if !f.IsValid() {
		panic(fmt.Sprintf("controllerutil.PatchStatus: %T has no Status field", obj))
	}
	return f.Interface()
}
