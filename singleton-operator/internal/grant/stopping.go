package grant

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// StoppingPath is the stopping notice's URL path.
const StoppingPath = "/v1/stopping"

// SuccessorWaiter says when the app of a pod being deleted may get its stop signal
// (controller.Successors).
type SuccessorWaiter interface {
	// WaitForSuccessor returns once it may, and why.
	WaitForSuccessor(ctx context.Context, pod *corev1.Pod) string
}

// StoppingHandler answers a status-sidecar's notice that its pod is stopping (the sidecar got SIGTERM
// and put the fence up; its wrappers hold their apps' SIGTERM back). It answers 204 once the apps may
// stop: at once, or, with Successors, once the pod's replacement runs and waits for its grant
// (spec.successorWait). The token's review is cached meanwhile (CachedAuthenticator) and the sidecar's
// connection open, so the exit report that follows costs neither. It changes nothing in the cluster:
// a notice that fails or never arrives only stops the apps at once.
type StoppingHandler struct {
	// Authenticate verifies the sidecar's token (the grant server's CachedAuthenticator).
	Authenticate Authenticator
	// Cache and APIReader read the pod (the cache first, live when it does not show the deletion yet).
	Cache, APIReader client.Reader
	// Successors, when set, decides how long the apps keep running; unset, the answer is immediate.
	Successors SuccessorWaiter
}

func (h *StoppingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req Request
	ctx, ok := authorize(w, r, h.Authenticate, &req, "Stopping notice")
	if !ok {
		return
	}
	if h.Successors != nil {
		start := time.Now()
		pod, err := readDeletedPod(ctx, h.Cache, h.APIReader, types.NamespacedName{Namespace: req.Namespace, Name: req.Name})
		why := "the pod is gone"
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			why = "reading the pod failed: " + err.Error()
		case err != nil:
		case pod.UID != req.UID:
			why = "the pod is another instance"
		case pod.DeletionTimestamp.IsZero():
			why = "the pod is not being deleted"
		default:
			why = h.Successors.WaitForSuccessor(ctx, pod)
		}
		logf.FromContext(ctx).Info("Stopping notice answered: the apps may stop", "waited", time.Since(start).String(), "why", why)
	}
	w.WriteHeader(http.StatusNoContent)
}

// readDeletedPod reads the pod from cache, and live when the cache does not show it being deleted yet:
// a sidecar's notice or report comes right after the deletion, possibly before its event reached the
// cache.
func readDeletedPod(ctx context.Context, cache, api client.Reader, key types.NamespacedName) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := cache.Get(ctx, key, pod); err == nil && !pod.DeletionTimestamp.IsZero() {
		return pod, nil
	}
	pod = &corev1.Pod{} // a fresh object: decoding into the cached copy would keep its stale map entries
	return pod, api.Get(ctx, key, pod)
}
