package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// cannedPrometheus answers every request with the status, content type and body last set.
type cannedPrometheus struct {
	mu          sync.Mutex
	code        int
	contentType string
	body        []byte
}

func (c *cannedPrometheus) set(code int, contentType string, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.code, c.contentType, c.body = code, contentType, body
}

func (c *cannedPrometheus) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", c.contentType)
	w.WriteHeader(c.code)
	_, _ = w.Write(c.body)
}

// maxCheckMessage bounds a check's message: it is stored in the PhasedRollout's status
// (lastQueryResult, lastError) and Events, whatever a Prometheus endpoint answers.
const maxCheckMessage = 4096

// referenceSamples decodes a 2xx body the way the Prometheus HTTP API defines it and returns the number of
// samples (series for a matrix, 1 for a scalar or string), or ok=false when the body is not a successful
// query answer.
func referenceSamples(body []byte) (n int, ok bool) {
	var answer struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	// client_golang judges a 2xx answer by its data alone: a missing status is taken as success (a
	// Prometheus always sends one; noted in the fuzz report as a possible hardening).
	if json.Unmarshal(body, &answer) != nil || (answer.Status != "success" && answer.Status != "") {
		return 0, false
	}
	switch answer.Data.ResultType {
	case "vector", "matrix":
		var items []json.RawMessage
		if json.Unmarshal(answer.Data.Result, &items) != nil {
			return 0, false
		}
		return len(items), true
	case "scalar", "string":
		return 1, true
	}
	return 0, false
}

// FuzzPrometheusResponse serves arbitrary answers (status code, content type, body) from a loopback
// Prometheus and runs the same check with both successWhen values. Whatever the answer: no panic; a
// non-2xx answer or a body that is not a successful query result is VerdictError (never a pass) under
// both; otherwise the two verdicts are opposite, the sample count in the message is the one the body
// holds, and the message stays bounded and names the endpoint when it reports an error.
func FuzzPrometheusResponse(f *testing.F) {
	for _, c := range []struct {
		code int
		body string
	}{
		{200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1700000000,"1"]},{"metric":{},"value":[1700000000,"NaN"]}]}}`},
		{200, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"],[2,"+Inf"]]}]}}`},
		{200, `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.5"]}}`},
		{200, `{"status":"success","data":{"resultType":"string","result":[1700000000,"x"]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[]},"warnings":["w1","w2"]}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":null}}`},
		{200, `{"status":"success","data":{"resultType":"bogus","result":[]}}`},
		{200, `{"status":"success"}`},
		{200, `{"status":"error","errorType":"bad_data","error":"parse error"}`},
		{400, `{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected"}`},
		{422, `{"status":"error","errorType":"execution","error":"many-to-many"}`},
		{503, `{"status":"error","errorType":"timeout","error":"query timed out"}`},
		{400, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
		{500, `internal error`},
		{302, ``},
		{401, `Unauthorized`},
		{200, `<html>not prometheus</html>`},
		{200, strings.Repeat("x", 10000)},
		{503, `{"status":"error","errorType":"timeout","error":"` + strings.Repeat("e", 10000) + `"}`},
		{400, `{"status":"error","errorType":"bad_data","error":"` + strings.Repeat("e", 10000) + `"}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[]},"warnings":["` + strings.Repeat(`w","`, 3000) + `w"]}`},
		{200, "\xff\xfe{"},
	} {
		f.Add(c.code, "application/json", []byte(c.body))
	}
	prom := &cannedPrometheus{}
	srv := httptest.NewServer(prom)
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, code int, contentType string, body []byte) {
		if code < 200 || code > 599 || code == http.StatusSwitchingProtocols || strings.ContainsAny(contentType, "\r\n\x00") {
			return // not an answer net/http can write
		}
		prom.set(code, contentType, body)
		var results [2]CheckResult
		for i, when := range []rolloutv1alpha1.SuccessWhen{rolloutv1alpha1.SuccessWhenNoData, rolloutv1alpha1.SuccessWhenDataReturned} {
			results[i] = PromChecker{}.Check(t.Context(), Query{URL: srv.URL, Expr: "up", SuccessWhen: when, Timeout: 5 * time.Second})
			res := results[i]
			if res.Message == "" || len(res.Message) > maxCheckMessage || !utf8.ValidString(res.Message) {
				t.Fatalf("message of %d bytes (valid UTF-8: %v): %.300q", len(res.Message), utf8.ValidString(res.Message), res.Message)
			}
			if res.Verdict == VerdictError && !strings.Contains(res.Message, srv.URL) && !strings.Contains(res.Message, "result") {
				t.Fatalf("the error does not say which Prometheus or what went wrong: %q", res.Message)
			}
		}
		n, ok := referenceSamples(body)
		if code/100 != 2 || !ok {
			if results[0].Verdict != VerdictError || results[1].Verdict != VerdictError {
				t.Fatalf("answer %d %.200q judged %v/%v, want error", code, body, results[0].Verdict, results[1].Verdict)
			}
			return
		}
		if results[0].Verdict == VerdictError || results[1].Verdict == VerdictError {
			// The client is stricter than the reference on sample contents (timestamps, values);
			// an error is always the safe verdict, and must be one under both successWhen values.
			if results[0].Verdict != results[1].Verdict {
				t.Fatalf("error under one successWhen only: %v", results)
			}
			return
		}
		if (results[0].Verdict == VerdictPass) == (results[1].Verdict == VerdictPass) {
			t.Fatalf("NoData and DataReturned agree on %.200q: %v", body, results)
		}
		if (results[0].Verdict == VerdictPass) != (n == 0) {
			t.Fatalf("%d samples in the body, NoData verdict %v", n, results[0].Verdict)
		}
		if !strings.HasPrefix(results[0].Message, fmt.Sprintf("%d samples returned", n)) {
			t.Fatalf("%d samples in the body, message %q", n, results[0].Message)
		}
	})
}

// FuzzNormalizeURL checks the URL a CR gives for Prometheus: the result is an http or https URL with a
// host, normalising is idempotent, and every refusal is a configuration error.
func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{"prom:9000/xx", "http://prom:9090", "https://prom.example", "ftp://prom:21", "", "http://",
		" http://p ", "p", "http://user:pw@p:1/x?y#z", "HTTP://P", "//p", "http://[::1]:9090", "http://%zz", "javascript://x",
		"prom:9090://x", "http:/p", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := NormalizeURL(raw)
		if err != nil {
			if !errors.Is(err, errConfig) {
				t.Fatalf("NormalizeURL(%q): %v is not a configuration error", raw, err)
			}
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("NormalizeURL(%q) = %q, which does not parse: %v", raw, got, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("NormalizeURL(%q) = %q: scheme %q host %q", raw, got, u.Scheme, u.Host)
		}
		again, err := NormalizeURL(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", raw, got, again, err)
		}
	})
}

// FuzzExpandQuery checks the placeholder substitution of check.query.expr: an expression without
// placeholders is unchanged, and substituted values are never themselves expanded again (a pod or
// revision name cannot inject another placeholder's value).
func FuzzExpandQuery(f *testing.F) {
	f.Add(`errors{namespace="{{namespace}}",pod="{{pod}}",ordinal="{{ordinal}}"} > 0`, "ns", "web", "web-7", int32(7), "web-abc")
	f.Add(`{{pod}}{{pod}}{{{pod}}}`, "{{pod}}", "{{namespace}}", "{{revision}}", int32(-1), "{{ordinal}}")
	f.Add(`up`, "", "", "", int32(0), "")
	f.Fuzz(func(t *testing.T, expr, ns, sts, pod string, ordinal int32, rev string) {
		got := expandQuery(expr, ns, sts, pod, ordinal, rev)
		if !strings.Contains(expr, "{{") && got != expr {
			t.Fatalf("expr without placeholders changed: %q -> %q", expr, got)
		}
		// Substituting with placeholder-free markers and then the values must give the same result:
		// the values are inserted verbatim, once.
		marked := expandQuery(expr, "\x01n\x02", "\x01s\x02", "\x01p\x02", ordinal, "\x01r\x02")
		if strings.ContainsAny(expr, "\x01\x02") {
			return
		}
		want := strings.NewReplacer("\x01n\x02", ns, "\x01s\x02", sts, "\x01p\x02", pod, "\x01r\x02", rev).Replace(marked)
		if got != want {
			t.Fatalf("expandQuery(%q) = %q, want %q", expr, got, want)
		}
	})
}
