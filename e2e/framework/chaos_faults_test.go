//go:build e2e

package framework

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The API proxy's write record answers by resourceVersion with the first answer that carried it, and
// records only writes of an object of a recorded resource, not its subresources, lists or reads.
func TestAPIWritesRecord(t *testing.T) {
	p := &apiFaultProxy{}
	p.RecordWrites("statefulsets")
	answer := func(method, path, body string) {
		t.Helper()
		req := httptest.NewRequest(method, path, nil)
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}
		require.NoError(t, p.writes.record(resp))
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, body, string(got), "the client still gets the whole answer")
	}
	const sts = "/apis/apps/v1/namespaces/ns/statefulsets/web"
	answer(http.MethodPatch, sts, `{"metadata":{"name":"web","resourceVersion":"7"}}`)
	first, ok := p.WriteTime("ns", "statefulsets", "web", "7")
	require.True(t, ok)
	time.Sleep(time.Millisecond)                                                       // so that a second record would differ
	answer(http.MethodPatch, sts, `{"metadata":{"name":"web","resourceVersion":"7"}}`) // an apply that changed nothing
	again, _ := p.WriteTime("ns", "statefulsets", "web", "7")
	assert.Equal(t, first, again, "the write that made resourceVersion 7 is the first one answered with it")

	answer(http.MethodPost, "/apis/apps/v1/namespaces/ns/statefulsets", `{"metadata":{"name":"db","resourceVersion":"9"}}`)
	_, ok = p.WriteTime("ns", "statefulsets", "db", "9")
	assert.True(t, ok, "a create names the object in its answer")

	answer(http.MethodPut, sts+"/status", `{"metadata":{"name":"web","resourceVersion":"8"}}`)
	answer(http.MethodGet, sts, `{"metadata":{"name":"web","resourceVersion":"10"}}`)
	answer(http.MethodPatch, "/apis/apps/v1/namespaces/ns/deployments/web", `{"metadata":{"name":"web","resourceVersion":"11"}}`)
	for _, rv := range []string{"8", "10"} {
		_, ok := p.WriteTime("ns", "statefulsets", "web", rv)
		assert.False(t, ok, "resourceVersion %s: not a recorded write", rv)
	}
	_, ok = p.WriteTime("ns", "deployments", "web", "11")
	assert.False(t, ok, "deployments are not recorded")
}
