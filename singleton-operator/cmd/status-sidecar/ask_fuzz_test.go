package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cannedGrant answers every request with the status and body last set, and records the last request.
type cannedGrant struct {
	mu     sync.Mutex
	code   int
	body   []byte
	auth   string
	sent   request
	method string
}

func (c *cannedGrant) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auth, c.method = r.Header.Get("Authorization"), r.Method
	c.sent = request{}
	_ = json.NewDecoder(r.Body).Decode(&c.sent)
	w.WriteHeader(c.code)
	_, _ = w.Write(c.body)
}

// FuzzSidecarAnswer feeds the sidecar's long poll arbitrary answers from a loopback grant endpoint and
// arbitrary token files. The sidecar must treat as a grant only a 200 whose JSON body says
// "granted": true (fail closed: anything else is "not yet" or an error to retry), and it must always
// present the pod's identity and the token, trimmed, as a bearer token in a POST.
func FuzzSidecarAnswer(f *testing.F) {
	f.Add(200, []byte(`{"granted":true}`), "tok\n")
	f.Add(200, []byte(`{"granted":false}`), "tok")
	f.Add(200, []byte(`{"granted":"true"}`), "tok")
	f.Add(200, []byte(`{"Granted":true}`), "tok")
	f.Add(200, []byte(`{"granted":true,"granted":false}`), "tok")
	f.Add(200, []byte(`{"granted":true} trailing`), "tok")
	f.Add(200, []byte(`true`), "tok")
	f.Add(200, []byte(`null`), "tok")
	f.Add(200, []byte(``), "tok")
	f.Add(200, []byte(strings.Repeat(" ", 5000)+`{"granted":true}`), "tok")
	f.Add(403, []byte(`{"granted":true}`), "tok")
	f.Add(500, []byte(`{"granted":true}`), " tok ")
	f.Add(302, []byte(``), "tok")
	srv := &cannedGrant{}
	ts := httptest.NewServer(srv)
	f.Cleanup(ts.Close)
	dir := f.TempDir()
	tokenFile := filepath.Join(dir, "token")
	f.Fuzz(func(t *testing.T, code int, body []byte, token string) {
		if code < 200 || code > 599 || code == http.StatusSwitchingProtocols {
			return // not an answer net/http can write
		}
		srv.mu.Lock()
		srv.code, srv.body, srv.method = code, body, ""
		srv.mu.Unlock()
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := config{url: ts.URL, tokenFile: tokenFile, req: request{Namespace: "ns", Name: "p", UID: "u"},
			client: &http.Client{Timeout: 5 * time.Second}}
		granted, err := ask(t.Context(), cfg)

		srv.mu.Lock()
		auth, sent, method := srv.auth, srv.sent, srv.method
		srv.mu.Unlock()
		if !validHeaderValue(strings.TrimSpace(token)) {
			// net/http refuses to send such a header: no request, an error, never a grant.
			if granted || err == nil || method != "" {
				t.Fatalf("token %q: granted=%v err=%v request %q", token, granted, err, method)
			}
			return
		}
		if method != http.MethodPost || sent != cfg.req {
			t.Fatalf("sent %q %+v, want POST %+v (err %v)", method, sent, cfg.req, err)
		}
		// The server side drops the space after an empty token, as it trims every header value.
		if want := strings.TrimSpace("Bearer " + strings.TrimSpace(token)); auth != want {
			t.Fatalf("Authorization %q, want %q", auth, want)
		}
		if code != http.StatusOK {
			if granted || err == nil {
				t.Fatalf("status %d: granted=%v err=%v, want an error", code, granted, err)
			}
			return
		}
		// The reference: the first JSON value of the body decodes into {"granted": bool}, field names
		// matched as encoding/json does.
		var ref struct {
			Granted bool `json:"granted"`
		}
		refErr := json.NewDecoder(strings.NewReader(string(body))).Decode(&ref)
		if granted && (refErr != nil || !ref.Granted) {
			t.Fatalf("granted on body %q", body)
		}
		if granted && err != nil {
			t.Fatalf("granted with an error: %v", err)
		}
	})
}

// validHeaderValue reports whether net/http sends v as a header value: no control byte but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if (v[i] < ' ' && v[i] != '\t') || v[i] == 0x7f {
			return false
		}
	}
	return true
}
