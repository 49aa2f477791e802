package grant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
)

// grantedUID is the only pod UID the fuzzed endpoint has released.
const grantedUID = "granted-uid"

// fixedGrants releases grantedUID only.
type fixedGrants struct{}

func (fixedGrants) Granted(uid types.UID) <-chan struct{} {
	if uid == grantedUID {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return nil // never released
}

// FuzzGrantRequest feeds the grant endpoint arbitrary methods, Authorization headers, bodies and token
// identities (what a review of the presented token would return). Whatever the input, the endpoint answers
// {"granted": true} only to a POST with a bearer token whose pod-bound identity is exactly the pod the
// well-formed body names, and only when that pod was released; it refuses with the documented status
// codes otherwise, and never answers 200 with anything but {"granted": bool}.
func FuzzGrantRequest(f *testing.F) {
	body := `{"namespace":"ns","name":"p","uid":"granted-uid"}`
	f.Add(http.MethodPost, "Bearer t", body, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Add(http.MethodPost, "Bearer t", body, "system:serviceaccount:ns:default", "p", grantedUID, true)
	f.Add(http.MethodPost, "Bearer t", body, "system:serviceaccount:other:default", "p", grantedUID, false)
	f.Add(http.MethodPost, "Bearer t", body, "system:serviceaccount:ns:default", "q", grantedUID, false)
	f.Add(http.MethodPost, "Bearer t", `{"namespace":"ns","name":"p","uid":"other"}`, "system:serviceaccount:ns:default", "p", "other", false)
	f.Add(http.MethodPost, "Bearer ", body, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Add(http.MethodPost, "Basic dTpw", body, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Add(http.MethodGet, "Bearer t", body, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Add(http.MethodPost, "Bearer t", `{"namespace":"ns","name":"p"}`, "system:serviceaccount:ns:default", "p", "", false)
	f.Add(http.MethodPost, "Bearer t", `{"namespace":"ns","name":"p","uid":"granted-uid"} trailing`, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Add(http.MethodPost, "Bearer t", `{"namespace":"n","name":"p","uid":"granted-uid"}`, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Add(http.MethodPost, "Bearer t", strings.Repeat(" ", 5000)+body, "system:serviceaccount:ns:default", "p", grantedUID, false)
	f.Fuzz(func(t *testing.T, method, authorization, body, username, podName, podUID string, reviewFails bool) {
		user := authenticationv1.UserInfo{Username: username, Extra: map[string]authenticationv1.ExtraValue{
			extraPodName: {podName}, extraPodUID: {podUID},
		}}
		var presented string
		h := &Handler{
			Authenticate: func(_ context.Context, token string) (authenticationv1.UserInfo, error) {
				presented = token
				if reviewFails {
					return authenticationv1.UserInfo{}, errors.New("not authenticated")
				}
				return user, nil
			},
			Grants:  fixedGrants{},
			MaxWait: time.Millisecond,
		}
		req, err := http.NewRequestWithContext(t.Context(), method, Path, bytes.NewReader([]byte(body)))
		if err != nil {
			return // not a method net/http can send
		}
		req.Header.Set("Authorization", authorization)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		token, bearer := strings.CutPrefix(authorization, "Bearer ")
		var parsed Request
		limited := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 4096)
		wellFormed := json.NewDecoder(limited).Decode(&parsed) == nil &&
			parsed.Namespace != "" && parsed.Name != "" && parsed.UID != ""
		// The reference of "bound to exactly this pod": the token's user is a ServiceAccount of the pod's
		// namespace (system:serviceaccount:<namespace>:<name>) and its pod name and UID are the body's.
		_, inNamespace := strings.CutPrefix(username, "system:serviceaccount:"+parsed.Namespace+":")
		bound := inNamespace && podName == parsed.Name && types.UID(podUID) == parsed.UID

		want := http.StatusOK
		switch {
		case method != http.MethodPost:
			want = http.StatusMethodNotAllowed
		case !bearer || token == "":
			want = http.StatusUnauthorized
		case !wellFormed:
			want = http.StatusBadRequest
		case reviewFails:
			want = http.StatusUnauthorized
		case !bound:
			want = http.StatusForbidden
		}
		if rec.Code != want {
			t.Fatalf("status %d, want %d (method %q, authorization %q, body %q, user %q, pod %q/%q, review fails %v)",
				rec.Code, want, method, authorization, body, username, podName, podUID, reviewFails)
		}
		if rec.Code == http.StatusOK {
			if presented != token {
				t.Fatalf("the reviewed token is %q, the request's %q", presented, token)
			}
			var resp map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp) != 1 {
				t.Fatalf("200 with body %q", rec.Body.String())
			}
			if granted := resp["granted"]; granted != (parsed.UID == grantedUID) {
				t.Fatalf("granted = %v for pod UID %q", granted, parsed.UID)
			}
		}
	})
}
