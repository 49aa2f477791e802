//go:build integration

package controller

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// TestChecksAgainstARealPrometheus runs the checker against a real Prometheus scraping an exporter
// the test controls: checks pass and fail for real, for both semantics, and an error never passes.
func TestChecksAgainstARealPrometheus(t *testing.T) {
	exp := newExporter(t)
	exp.set(`app_errors{pod="web-2"}`, "0")
	prom := startPrometheus(t, hostPort(t, exp.srv.URL))

	noData := Query{URL: prom.URL, Expr: `app_errors{pod="web-2"} > 0`, Timeout: 2 * time.Second}
	dataReturned := Query{URL: prom.URL, Expr: `app_errors{pod="web-2"} == 0`, SuccessWhen: rolloutv1alpha1.SuccessWhenDataReturned, Timeout: 2 * time.Second}

	// Healthy: the failure query returns nothing (NoData passes), the health query returns a sample.
	waitForVerdict(t, dataReturned, VerdictPass)
	res := waitForVerdict(t, noData, VerdictPass)
	assert.Equal(t, "0 samples returned: check passed (successWhen NoData)", res.Message)

	// Unhealthy: errors appear; both semantics fail.
	exp.set(`app_errors{pod="web-2"}`, "3")
	res = waitForVerdict(t, noData, VerdictFail)
	assert.Equal(t, "1 samples returned: check failed (successWhen NoData)", res.Message)
	waitForVerdict(t, dataReturned, VerdictFail)

	t.Run("the URL without a scheme means http", func(t *testing.T) {
		q := noData
		q.URL = strings.TrimPrefix(prom.URL, "http://")
		assert.Equal(t, VerdictFail, PromChecker{}.Check(context.Background(), q).Verdict)
	})
	t.Run("an invalid query is an error", func(t *testing.T) {
		q := noData
		q.Expr = "app_errors{"
		res := PromChecker{}.Check(context.Background(), q)
		assert.Equal(t, VerdictError, res.Verdict)
		assert.Contains(t, res.Message, "rejected the query")
	})
	t.Run("another scheme is refused", func(t *testing.T) {
		q := noData
		q.URL = "ftp://" + hostPort(t, prom.URL)
		res := PromChecker{}.Check(context.Background(), q)
		assert.Equal(t, VerdictError, res.Verdict)
		assert.Contains(t, res.Message, "not supported")
	})
	t.Run("a wrong path is an error", func(t *testing.T) {
		q := noData
		q.URL = prom.URL + "/nothing-here"
		q.Expr = `app_errors{pod="nobody"} > 0` // would pass if the error counted as no data
		assert.Equal(t, VerdictError, PromChecker{}.Check(context.Background(), q).Verdict)
	})
	t.Run("bearer token", func(t *testing.T) {
		url := authProxy(t, prom.URL, false, "Bearer s3cret")
		q := noData
		q.URL = url
		q.Expr = `app_errors{pod="nobody"} > 0`
		res := PromChecker{}.Check(context.Background(), q)
		assert.Equal(t, VerdictError, res.Verdict, "no credentials")
		assert.Contains(t, res.Message, "refused the request")
		q.Token = "s3cret"
		assert.Equal(t, VerdictPass, PromChecker{}.Check(context.Background(), q).Verdict)
		q.Token = "wrong"
		assert.Equal(t, VerdictError, PromChecker{}.Check(context.Background(), q).Verdict)
	})
	t.Run("basic auth", func(t *testing.T) {
		url := authProxy(t, prom.URL, false, "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:pw")))
		q := noData
		q.URL = url
		q.Expr = `app_errors{pod="nobody"} > 0`
		q.Username, q.Password = "alice", "pw"
		assert.Equal(t, VerdictPass, PromChecker{}.Check(context.Background(), q).Verdict)
		q.Password = "bad"
		assert.Equal(t, VerdictError, PromChecker{}.Check(context.Background(), q).Verdict)
	})
	t.Run("TLS with insecureSkipVerify", func(t *testing.T) {
		url := authProxy(t, prom.URL, true, "")
		q := noData
		q.URL = url
		q.Expr = `app_errors{pod="nobody"} > 0`
		res := PromChecker{}.Check(context.Background(), q)
		assert.Equal(t, VerdictError, res.Verdict, "an unverifiable certificate must not pass")
		q.InsecureSkipVerify = true
		assert.Equal(t, VerdictPass, PromChecker{}.Check(context.Background(), q).Verdict)
	})
	t.Run("a timeout is an error", func(t *testing.T) {
		q := noData
		q.Expr = `app_errors{pod="nobody"} > 0`
		q.Timeout = time.Nanosecond
		assert.Equal(t, VerdictError, PromChecker{}.Check(context.Background(), q).Verdict)
	})

	// Prometheus stopped: a query that would pass (no data) is an error, never a pass.
	prom.stop()
	q := noData
	q.Expr = `app_errors{pod="nobody"} > 0`
	res = PromChecker{}.Check(context.Background(), q)
	assert.Equal(t, VerdictError, res.Verdict)
	assert.Contains(t, res.Message, "unreachable")
}
