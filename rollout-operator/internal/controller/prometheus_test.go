package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNormalizeURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "prom:9000/xx", want: "http://prom:9000/xx"},
		{in: "http://prom:9090", want: "http://prom:9090"},
		{in: "https://prom.example", want: "https://prom.example"},
		{in: "ftp://prom:21", err: `scheme "ftp" is not supported`},
		{in: "", err: "empty"},
		{in: "http://", err: "no host"},
		{in: "http://:9090", err: "no host"},
		{in: "http://user@:9090", err: "no host"},
	} {
		got, err := NormalizeURL(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got)
	}
}

func TestExpandQuery(t *testing.T) {
	got := expandQuery(`errors{namespace="{{namespace}}",sts="{{statefulset}}",pod="{{pod}}",ordinal="{{ordinal}}",rev="{{revision}}"} > 0`, "ns", "web", "web-7", 7, "web-abc")
	assert.Equal(t, `errors{namespace="ns",sts="web",pod="web-7",ordinal="7",rev="web-abc"} > 0`, got)
}
