// Package grant is the singleton operator's start-grant endpoint: the status-sidecar of a held
// Wrapper-mode pod long-polls it, and it answers once the operator has released that pod. No
// exec into pods is needed, and the app's ServiceAccount gets no API permission: the sidecar only presents
// its pod-bound projected ServiceAccount token, which the operator verifies itself.
//
// # Protocol
//
//	POST /v1/grant  (HTTPS)
//	Authorization: Bearer <projected ServiceAccount token, audience "statefulsingleton">
//	Content-Type: application/json
//	{"namespace": "<pod namespace>", "name": "<pod name>", "uid": "<pod UID>"}
//
// The server reviews the token (TokenReview with audience "statefulsingleton") and accepts it only if it
// is bound to exactly that pod: the review's extra fields authentication.kubernetes.io/pod-name and
// pod-uid must equal name and uid, and the user must be a ServiceAccount of namespace. A failed review
// answers 401, a token for another pod 403, a malformed request 400.
//
// It then waits, up to MaxWait (default 30 s), for the grant of that pod UID:
//
//	200 {"granted": true}    the operator released the pod: write the start signal now
//	200 {"granted": false}   no grant yet: ask again at once (long poll, no fixed polling interval)
//
// The answer comes as soon as the grant is known, so the start follows the release within a round trip.
// Any other outcome (network error, 5xx, 4xx) means "not granted": the sidecar retries with back-off and
// the app stays blocked — fail closed.
//
// # Exit report
//
//	POST /v1/exited  (same server, TLS and token)
//	{"namespace": "<pod namespace>", "name": "<pod name>", "uid": "<pod UID>", "containers": ["app", ...]}
//
// The status-sidecar of a terminating Wrapper pod sends it once the process of every wrapped app
// container has exited. Authentication and binding are the grant's (400, 401, 403 alike). The server
// reads the pod (its cache, live when the cache does not show the deletion yet) and records the report
// as the annotation apps.statefulsingleton.com/exited (the app containers, comma-separated) only if the
// pod is that instance (UID), has a deletionTimestamp, was admitted with the Wrapper hold, and
// containers names every container but the status-sidecar; the controller then no longer waits for
// the pod to leave the API. Answers:
//
//	200 {"recorded": true}   recorded (also when it already was)
//	404                      the pod is gone: nothing left to report
//	409                      not terminating, another instance, not Wrapper, or a container left out
//
// A report that is refused or never arrives changes nothing: the controller waits for the pod to be
// gone or terminal, as without it.
//
// # Stopping notice
//
//	POST /v1/stopping  (same server, TLS, token and body as the grant)
//
// The status-sidecar sends it when its pod starts stopping (SIGTERM), once it has put the fence up; the
// wrappers hold their apps' SIGTERM back until the sidecar writes the stop signal after the answer.
// The answer, 204 (400, 401, 403 as above), comes once the apps may stop: when the pod's replacement
// runs and waits for its grant, at once when none can be prepared, at the latest after
// spec.successorWait (controller.Successors). Successful token reviews are reused for a minute
// (CachedAuthenticator), so the exit report that follows costs no review, and it reuses the notice's
// connection. Nothing depends on the notice for safety: without an answer the apps stop at once.
//
// # In the same process
//
// The controller learns of an accepted report from Exits before its annotation is written, and
// overlaps its live list and epoch reservation with that write; it releases the next pod only once
// the write succeeded. The grant server learns of a release from ServeConfig.Released as soon as its
// patch succeeded. Both save a watch event's delay; a replica that is not the leader goes by the
// annotations alone.
//
// # Grants
//
// Grants is the interface the controller drives. AnnotationGrants implements it from the pod annotation
// apps.statefulsingleton.com/start-granted that the controller writes when it releases a pod, so the
// grant is part of the cluster's state (a restarted operator, or another replica, answers the same) and
// tests drive the endpoint by annotating a pod, without a test double.
package grant

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// The grant server reviews the sidecars' tokens, follows pod annotations and records the sidecars' exit
// reports as a pod annotation.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// Path is the endpoint's URL path.
const Path = "/v1/grant"

// Request is the body the sidecar sends.
type Request struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// Response is the body of a 200 answer.
type Response struct {
	Granted bool `json:"granted"`
}

// Grants tells when the operator has released a pod.
type Grants interface {
	// Granted returns a channel that is closed once the pod with this UID is released (at once if it
	// already is).
	Granted(uid types.UID) <-chan struct{}
}

// Authenticator verifies a bearer token and returns who presented it.
type Authenticator func(ctx context.Context, token string) (authenticationv1.UserInfo, error)

// TokenReviewAuthenticator authenticates tokens through the API server's TokenReview, accepting only
// the audience statefulsingleton.
func TokenReviewAuthenticator(c client.Client) Authenticator {
	return func(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
			Token:     token,
			Audiences: []string{singletonv1.GrantTokenAudience},
		}}
		if err := c.Create(ctx, review); err != nil {
			return authenticationv1.UserInfo{}, fmt.Errorf("token review: %w", err)
		}
		if !review.Status.Authenticated {
			return authenticationv1.UserInfo{}, fmt.Errorf("token not authenticated: %s", review.Status.Error)
		}
		if !slices.Contains(review.Status.Audiences, singletonv1.GrantTokenAudience) {
			return authenticationv1.UserInfo{}, errors.New("token is not for the statefulsingleton audience")
		}
		return review.Status.User, nil
	}
}

// reviewTTL is how long a token's successful review is reused, reviewCacheSize how many are kept.
// The exit report is on the handover's critical path, and the review is one API round trip of it
// (8-40 ms on the real node while the old pod's containers are torn down): the status-sidecar has its
// token reviewed once when its pod starts stopping (StoppingPath), and the report then finds the
// answer here. A token stays valid while its pod exists; a cached answer for a pod deleted
// meanwhile grants nothing (no release ever names that UID) and records nothing (the pod is read, and
// the annotation's patch carries the UID). The API server's own webhook token authenticator caches
// successful answers for 2 minutes.
const (
	reviewTTL       = time.Minute
	reviewCacheSize = 4096
)

// CachedAuthenticator reuses authenticate's successful answers for reviewTTL, keyed by the token's
// SHA-256 (the tokens themselves are not kept). Failures are never cached: a token that did not pass
// is reviewed again on its next request.
func CachedAuthenticator(authenticate Authenticator) Authenticator {
	reviewed := utilcache.NewLRUExpireCache(reviewCacheSize)
	return func(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
		key := sha256.Sum256([]byte(token))
		if user, ok := reviewed.Get(key); ok {
			return user.(authenticationv1.UserInfo), nil
		}
		user, err := authenticate(ctx, token)
		if err == nil {
			reviewed.Add(key, user, reviewTTL)
		}
		return user, err
	}
}

// Handler serves the grant endpoint.
type Handler struct {
	// Authenticate verifies the sidecar's token (TokenReviewAuthenticator in production).
	Authenticate Authenticator
	// Grants says when a pod is released.
	Grants Grants
	// MaxWait bounds one long poll; default 30 s, below common proxy and client timeouts.
	MaxWait time.Duration
}

// Extra keys of a pod-bound ServiceAccount token's user info.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req Request
	ctx, ok := authorize(w, r, h.Authenticate, &req, "Grant request")
	if !ok {
		return
	}
	log := logf.FromContext(ctx)

	wait := h.MaxWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	asked := time.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	granted := false
	select {
	case <-h.Grants.Granted(req.UID):
		granted = true
		log.Info("Start granted", "waited", time.Since(asked).String())
	case <-timer.C:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Response{Granted: granted})
}

// podRequest is a sidecar's request body, which names its pod.
type podRequest interface{ pod() Request }

func (r Request) pod() Request { return r }

// authorize reads a sidecar's request into body and accepts it only if it is a POST whose bearer token
// authenticates and is bound to exactly the pod body names. It answers a refusal itself (405, 401, 400,
// 403; what names the request in the log) and then returns false; otherwise a context whose logger
// names the pod. Every endpoint of a pod's sidecar goes through it, so none can be asked about another
// pod.
func authorize(w http.ResponseWriter, r *http.Request, authenticate Authenticator, body podRequest, what string) (context.Context, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return nil, false
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		http.Error(w, "a bearer token is required", http.StatusUnauthorized)
		return nil, false
	}
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(body)
	req := body.pod()
	if err != nil || req.Namespace == "" || req.Name == "" || req.UID == "" {
		http.Error(w, "the body must be JSON naming the pod: {\"namespace\", \"name\", \"uid\"}", http.StatusBadRequest)
		return nil, false
	}
	log := logf.FromContext(r.Context()).WithValues("pod", req.Namespace+"/"+req.Name, "podUID", req.UID)
	user, err := authenticate(r.Context(), token)
	if err != nil {
		log.V(1).Info(what+" refused", "reason", err.Error())
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return nil, false
	}
	if err := boundTo(user, req); err != nil {
		log.Info(what+" refused", "reason", err.Error(), "user", user.Username)
		http.Error(w, "the token is not bound to this pod", http.StatusForbidden)
		return nil, false
	}
	return logf.IntoContext(r.Context(), log), true
}

// boundTo checks that the token's user is a ServiceAccount of the pod's namespace and that the token is
// bound to exactly this pod (name and UID), so one pod can never ask for another's grant.
func boundTo(user authenticationv1.UserInfo, req Request) error {
	if !strings.HasPrefix(user.Username, "system:serviceaccount:"+req.Namespace+":") {
		return fmt.Errorf("user %q is not a ServiceAccount of namespace %q", user.Username, req.Namespace)
	}
	if got := user.Extra[extraPodUID]; len(got) != 1 || got[0] != string(req.UID) {
		return fmt.Errorf("token is bound to pod UID %v, not %s", []string(got), req.UID)
	}
	if got := user.Extra[extraPodName]; len(got) != 1 || got[0] != req.Name {
		return fmt.Errorf("token is bound to pod %v, not %s", []string(got), req.Name)
	}
	return nil
}
