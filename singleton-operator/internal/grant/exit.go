package grant

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// ExitPath is the exit report's URL path.
const ExitPath = "/v1/exited"

// ExitRequest is the body of an exit report: the pod, and the app containers whose process exited.
type ExitRequest struct {
	Request
	Containers []string `json:"containers"`
}

// ExitResponse is the body of a 200 answer to an exit report.
type ExitResponse struct {
	Recorded bool `json:"recorded"`
}

// ExitHandler serves the exit report: the status-sidecar of a terminating Wrapper pod tells that every
// app container's process exited, and the handler records it on the pod (AnnotationExited), after which
// the controller no longer counts the pod as blocking. It records only what the pod's own token
// reports about that pod instance while it is terminating: a pod that is not being deleted can start
// its app again, and its report says nothing about its future.
type ExitHandler struct {
	// Authenticate verifies the sidecar's token (TokenReviewAuthenticator in production).
	Authenticate Authenticator
	// Cache reads the pod first (the operator's cache: no API call when it already shows the deletion).
	Cache client.Reader
	// APIReader reads the pod live when the cache does not show its deletion yet: the sidecar reports
	// right after the kubelet stopped the app, possibly before the deletion's event reached the cache.
	APIReader client.Reader
	// Client writes the annotation.
	Client client.Writer
	// Exits, when set, tells this process's controller of each report as its annotation's write
	// begins (Exits).
	Exits *Exits
	// PredecessorExited, when set, is told of each accepted report before its annotation is written:
	// the grant server starts the pods released on that pod's exit (AnnotationGrants).
	PredecessorExited func(types.UID)
}

func (h *ExitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req ExitRequest
	start := time.Now()
	ctx, ok := authorize(w, r, h.Authenticate, &req, "Exit report")
	if !ok {
		return
	}
	reviewed := time.Now()
	log := logf.FromContext(ctx).WithValues("reported", req.Containers)
	refuse := func(code int, reason string) {
		log.Info("Exit report refused", "reason", reason)
		http.Error(w, reason, code)
	}
	pod, err := readDeletedPod(ctx, h.Cache, h.APIReader, types.NamespacedName{Namespace: req.Namespace, Name: req.Name})
	if apierrors.IsNotFound(err) {
		refuse(http.StatusNotFound, "the pod is gone")
		return
	} else if err != nil {
		log.Error(err, "Exit report failed: reading the pod")
		http.Error(w, "reading the pod failed", http.StatusInternalServerError)
		return
	}
	apps, reason := exitRefusal(pod, req)
	if reason != "" {
		refuse(http.StatusConflict, reason)
		return
	}
	value := strings.Join(apps, ",")
	if h.PredecessorExited != nil {
		// Before the write: every app process of this terminating pod instance is gone, and the fence
		// keeps a restarted container from starting its app again, whether or not the record lands.
		h.PredecessorExited(pod.UID)
	}
	read := time.Now()
	if pod.Annotations[singletonv1.AnnotationExited] != value {
		// A merge patch carrying the UID: it can only annotate the pod instance the token is bound to (a
		// pod recreated under the same name has another UID, which the API server refuses to change).
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
			"annotations": map[string]string{singletonv1.AnnotationExited: value}}})
		if err == nil {
			end := h.Exits.Begin(pod.DeepCopy()) // a copy: Patch decodes the answer into pod
			err = h.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, raw))
			end(err)
		}
		switch {
		case apierrors.IsNotFound(err):
			refuse(http.StatusNotFound, "the pod is gone")
			return
		case apierrors.IsConflict(err) || apierrors.IsInvalid(err): // its UID changed
			refuse(http.StatusConflict, "the pod changed: "+err.Error())
			return
		case err != nil:
			log.Error(err, "Exit report failed: annotating the pod")
			http.Error(w, "annotating the pod failed", http.StatusInternalServerError)
			return
		}
	}
	// Where the report's time went (it is on the handover's critical path): the token review, reading
	// the pod, the annotation's patch.
	log.Info("Exit reported", "containers", value, "review", reviewed.Sub(start).String(),
		"podRead", read.Sub(reviewed).String(), "patch", time.Since(read).String())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ExitResponse{Recorded: true})
}

// exitRefusal returns the pod's app containers (every container but the status-sidecar, in spec order),
// or why the report cannot be recorded on pod: another instance of the pod, a pod not being deleted,
// one not held by the wrapper (nothing reports its app's exit), or a report that leaves out an app
// container.
func exitRefusal(pod *corev1.Pod, req ExitRequest) ([]string, string) {
	switch {
	case pod.UID != req.UID:
		return nil, fmt.Sprintf("the pod is another instance (UID %s)", pod.UID)
	case pod.DeletionTimestamp.IsZero():
		return nil, "the pod is not terminating"
	case singletonv1.HoldMode(pod.Annotations[singletonv1.AnnotationHoldMode]) != singletonv1.HoldModeWrapper:
		return nil, "the pod was not admitted with the Wrapper hold"
	}
	var apps []string
	for _, c := range pod.Spec.Containers {
		if c.Name == singletonv1.SidecarContainerName {
			continue
		}
		if !slices.Contains(req.Containers, c.Name) {
			return nil, fmt.Sprintf("the report leaves out app container %s", c.Name)
		}
		apps = append(apps, c.Name)
	}
	return apps, ""
}
