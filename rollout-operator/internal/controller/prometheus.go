package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Query is one check to run: where Prometheus is, how to authenticate, what to evaluate and how to
// judge the result.
type Query struct {
	// URL is check.query.url as the user wrote it (a missing scheme means http).
	URL string
	// Expr is the PromQL expression, placeholders already substituted.
	Expr string
	// Token is a bearer token; empty means none.
	Token string
	// Username and Password are basic-authentication credentials, used when Username is set.
	Username, Password string
	// InsecureSkipVerify skips verification of Prometheus's TLS certificate.
	InsecureSkipVerify bool
	// SuccessWhen says which result passes.
	SuccessWhen rolloutv1alpha1.SuccessWhen
	// Timeout bounds the whole query; zero means 10 seconds.
	Timeout time.Duration
	// SuccessCondition, when set, judges the samples instead of SuccessWhen (verdict.go).
	SuccessCondition string
	// NoDataPolicy judges an empty result under SuccessCondition; empty means what SuccessWhen implies.
	NoDataPolicy rolloutv1alpha1.NoDataPolicy
}

// Verdict is the outcome of one check.
type Verdict int

const (
	// VerdictError means the query could not be evaluated; it never counts as a pass.
	VerdictError Verdict = iota
	// VerdictFail means the query was evaluated and its result fails the check.
	VerdictFail
	// VerdictPass means the query was evaluated and its result passes the check.
	VerdictPass
	// VerdictInconclusive means the query returned no sample under noDataPolicy Inconclusive.
	VerdictInconclusive
)

// String names the verdict as the metrics label it.
func (v Verdict) String() string {
	switch v {
	case VerdictPass:
		return "pass"
	case VerdictFail:
		return "fail"
	case VerdictInconclusive:
		return "inconclusive"
	default:
		return "error"
	}
}

// CheckResult is a Verdict with a sentence a person can act on.
type CheckResult struct {
	Verdict Verdict
	// Message describes the result ("2 samples returned: check failed (successWhen NoData)") or the
	// error ("Prometheus at http://prom:9090 unreachable: ...").
	Message string
	// Value summarises the samples (status.rollingPodStatus.checks[].lastValue); empty on an error.
	Value string
}

// Checker runs checks. PromChecker is the real one; tests may substitute another.
type Checker interface {
	Check(ctx context.Context, q Query) CheckResult
}

// PromChecker runs checks against Prometheus's HTTP API through client_golang's API client.
type PromChecker struct{}

// errConfig marks a configuration error (bad URL or scheme): retrying does not help until the
// PhasedRollout or its Secret is fixed.
var errConfig = errors.New("invalid Prometheus configuration")

// NormalizeURL returns the Prometheus base URL with a scheme: none means http; only http and https
// are accepted.
func NormalizeURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("%w: check.query.url is empty", errConfig)
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: check.query.url %q: %v", errConfig, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: check.query.url scheme %q is not supported, use http or https", errConfig, u.Scheme)
	}
	// Hostname, not Host: "http://:9090" has a Host (":9090") but no host to connect to, and the CRD's
	// rule refuses it too.
	if u.Hostname() == "" {
		return "", fmt.Errorf("%w: check.query.url %q has no host", errConfig, raw)
	}
	return u.String(), nil
}

// Check evaluates q as an instant query at the current time. Any error, timeout, non-2xx answer or
// unparsable response is VerdictError. The message is valid UTF-8 of at most maxMessageBytes, whatever
// the endpoint answers: it goes into the PhasedRollout's status and Events.
func (PromChecker) Check(ctx context.Context, q Query) CheckResult {
	res := check(ctx, q)
	res.Message = boundMessage(res.Message)
	return res
}

// maxMessageBytes bounds a check's message. Prometheus's error text and warnings, and the client's
// decoding errors (which quote the body), are the endpoint's to choose: a CR may point at any URL.
const maxMessageBytes = 4096

// boundMessage makes msg valid UTF-8 (a decoding error may quote raw bytes of the body) and cuts it to
// maxMessageBytes at a rune boundary.
func boundMessage(msg string) string {
	return cutUTF8(msg, maxMessageBytes, " … (truncated)")
}

func check(ctx context.Context, q Query) CheckResult {
	address, err := NormalizeURL(q.URL)
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: err.Error()}
	}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	transport := newTransport(q.InsecureSkipVerify)
	// The transport is this check's own, so its keep-alive connection would never be reused: close it
	// rather than hold a socket per check for the idle timeout.
	defer transport.CloseIdleConnections()
	rt := withCredentials(transport, credentials{Token: q.Token, Username: q.Username, Password: q.Password})
	c, err := api.NewClient(api.Config{Address: address, Client: &http.Client{Transport: rt, Timeout: timeout}})
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: fmt.Sprintf("%v: %v", errConfig, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	value, warnings, err := promv1.NewAPI(c).Query(ctx, q.Expr, time.Now(), promv1.WithTimeout(timeout))
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: describeQueryError(address, err)}
	}
	n, err := samples(value)
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: err.Error()}
	}
	if q.SuccessCondition != "" {
		return judgeCondition(ctx, q, value)
	}
	pass := n == 0
	if q.SuccessWhen == rolloutv1alpha1.SuccessWhenDataReturned {
		pass = n > 0
	}
	when := q.SuccessWhen
	if when == "" {
		when = rolloutv1alpha1.SuccessWhenNoData
	}
	verdict, word := VerdictFail, "failed"
	if pass {
		verdict, word = VerdictPass, "passed"
	}
	msg := fmt.Sprintf("%d samples returned: check %s (successWhen %s)", n, word, when)
	if len(warnings) > 0 {
		msg += "; Prometheus warnings: " + strings.Join(warnings, "; ")
	}
	return CheckResult{Verdict: verdict, Message: msg, Value: valueOf(value)}
}

// samples counts the samples (or series) of a query result.
func samples(v model.Value) (int, error) {
	switch r := v.(type) {
	case model.Vector:
		return len(r), nil
	case model.Matrix:
		return len(r), nil
	case *model.Scalar, *model.String:
		return 1, nil
	case nil:
		return 0, errors.New("prometheus returned no result value")
	default:
		return 0, fmt.Errorf("prometheus returned an unexpected result type %s", v.Type())
	}
}

// describeQueryError turns a client error into a sentence that says what to look at.
func describeQueryError(address string, err error) string {
	var perr *promv1.Error
	if errors.As(err, &perr) {
		switch perr.Type {
		case promv1.ErrBadData:
			return fmt.Sprintf("Prometheus at %s rejected the query (check check.query.expr): %s", address, perr.Msg)
		case promv1.ErrTimeout, promv1.ErrCanceled:
			return fmt.Sprintf("query to Prometheus at %s timed out: %s", address, perr.Msg)
		case promv1.ErrClient:
			return fmt.Sprintf("Prometheus at %s refused the request (wrong URL path or credentials? check check.query.url and check.query.secretRef): %v", address, err)
		case promv1.ErrServer:
			return fmt.Sprintf("Prometheus at %s answered with a server error: %v", address, err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("query to Prometheus at %s timed out: %v", address, err)
	}
	return fmt.Sprintf("Prometheus at %s unreachable or answered unexpectedly (check check.query.url): %v", address, err)
}

// newTransport is the HTTP transport of one check, Prometheus query or webhook call: the default
// transport's settings (proxy from HTTPS_PROXY/HTTP_PROXY/NO_PROXY, dial and TLS handshake timeouts),
// with certificate verification skipped when the user asked for it.
func newTransport(insecureSkipVerify bool) *http.Transport {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: insecureSkipVerify} //nolint:gosec // the user's explicit choice (insecureSkipVerify)
	return transport
}

// credentials are the contents of a check's secretRef: a bearer token, or basic-authentication
// username and password; empty means none.
type credentials struct {
	Token, Username, Password string
}

// withCredentials wraps rt to authenticate every request with c: a bearer token when set, else
// basic authentication when a username is set, else nothing.
func withCredentials(rt http.RoundTripper, c credentials) http.RoundTripper {
	switch {
	case c.Token != "":
		return authRoundTripper{next: rt, set: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+c.Token) }}
	case c.Username != "":
		return authRoundTripper{next: rt, set: func(r *http.Request) { r.SetBasicAuth(c.Username, c.Password) }}
	}
	return rt
}

// authRoundTripper sets credentials on a copy of each request.
type authRoundTripper struct {
	next http.RoundTripper
	set  func(*http.Request)
}

// RoundTrip implements http.RoundTripper.
func (a authRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	a.set(r)
	return a.next.RoundTrip(r)
}
