package controllerutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestScopeCacheKeepsOtherKinds(t *testing.T) {
	node := &corev1.Node{}
	o := cache.Options{ByObject: map[client.Object]cache.ByObject{node: {Transform: SlimNode}}}
	pod := &corev1.Pod{}
	ScopeCache(&o, map[client.Object]cache.ByObject{pod: {Label: HasLabel("app")}})
	assert.Len(t, o.ByObject, 2)
	assert.NotNil(t, o.ByObject[node].Transform)
	assert.NotNil(t, o.ByObject[pod].Label)

	var empty cache.Options
	ScopeCache(&empty, map[client.Object]cache.ByObject{pod: {}})
	assert.Len(t, empty.ByObject, 1)
}

func TestHasLabel(t *testing.T) {
	sel := HasLabel("app")
	assert.True(t, sel.Matches(labels.Set{"app": ""}))
	assert.True(t, sel.Matches(labels.Set{"app": "db"}))
	assert.False(t, sel.Matches(labels.Set{"other": "db"}))
	assert.Panics(t, func() { HasLabel("not a key!") })
}
