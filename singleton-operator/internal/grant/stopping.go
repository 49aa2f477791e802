package grant

import "net/http"

// StoppingPath is the stopping notice's URL path.
const StoppingPath = "/v1/stopping"

// StoppingHandler answers a status-sidecar's notice that its pod is stopping (the sidecar got
// SIGTERM). It only authorizes the request and answers 204: the token's review is then cached
// (CachedAuthenticator) and the sidecar's connection open, so the exit report that follows once the
// app exits costs neither. It changes nothing: a notice that never arrives only makes the report
// slower.
type StoppingHandler struct {
	// Authenticate verifies the sidecar's token (the grant server's CachedAuthenticator).
	Authenticate Authenticator
}

func (h *StoppingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req Request
	if _, ok := authorize(w, r, h.Authenticate, &req, "Stopping notice"); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
