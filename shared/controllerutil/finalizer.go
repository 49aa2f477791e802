package controllerutil

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlutil "sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds the finalizer to obj when it lacks it, with a merge patch under an optimistic
// lock (a finalizer added to a stale copy must fail rather than drop another's change), and reports
// whether it wrote. On success obj holds what the API server returned.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (bool, error) {
	if ctrlutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	ctrlutil.AddFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("adding the finalizer: %w", err)
	}
	return true, nil
}

// RemoveFinalizer removes the finalizer from obj when it has it, with a merge patch under an optimistic
// lock, and reports whether it wrote. An object already gone counts as done.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (bool, error) {
	if !ctrlutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	ctrlutil.RemoveFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("removing the finalizer: %w", err)
	}
	return true, nil
}
