package controllerutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NotOlderThan keeps the namespace and selector of the List's other options.
func TestNotOlderThan(t *testing.T) {
	opts := (&client.ListOptions{}).ApplyOptions([]client.ListOption{client.InNamespace("ns"), client.MatchingLabels{"a": "b"}, NotOlderThan("42")})
	raw := opts.AsListOptions()
	assert.Equal(t, "42", raw.ResourceVersion)
	assert.Equal(t, metav1.ResourceVersionMatchNotOlderThan, raw.ResourceVersionMatch)
	assert.Equal(t, "a=b", raw.LabelSelector)
	assert.Equal(t, "ns", opts.Namespace)
}
