package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// SL-08: of two locks on one StatefulSet exactly one comes first: the older, or within the same second
// (creationTimestamp's precision) the one with the smaller name.
func TestPrecedes(t *testing.T) {
	at := func(name string, sec int64) *leasev1.StatefulSetLock {
		return &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(sec, 0))}}
	}
	for _, tc := range []struct {
		a, b *leasev1.StatefulSetLock
		want bool
	}{
		{at("z", 100), at("a", 101), true},  // older wins over a smaller name
		{at("a", 101), at("z", 100), false}, // younger yields
		{at("a", 100), at("b", 100), true},  // same second: the smaller name
		{at("b", 100), at("a", 100), false},
		{at("a", 100), at("a", 100), false}, // never before itself
	} {
		assert.Equal(t, tc.want, precedes(tc.a, tc.b), "%s@%v before %s@%v", tc.a.Name, tc.a.CreationTimestamp, tc.b.Name, tc.b.CreationTimestamp)
	}
}
