package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestMaxUnavailable computes maxUnavailable as the StatefulSet controller does: default 1, a
// percentage of replicas rounded down, at least 1, at most replicas.
func TestMaxUnavailable(t *testing.T) {
	for _, c := range []struct {
		v        *intstr.IntOrString
		replicas int32
		want     int32
	}{
		{nil, 5, 1},
		{&intstr.IntOrString{Type: intstr.Int, IntVal: 2}, 5, 2},
		{&intstr.IntOrString{Type: intstr.String, StrVal: "40%"}, 5, 2},
		{&intstr.IntOrString{Type: intstr.String, StrVal: "10%"}, 5, 1},
		{&intstr.IntOrString{Type: intstr.Int, IntVal: 9}, 3, 3},
		{&intstr.IntOrString{Type: intstr.String, StrVal: "bad"}, 3, 1},
	} {
		sts := &appsv1.StatefulSet{}
		if c.v != nil {
			sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: c.v}
		}
		assert.Equal(t, c.want, maxUnavailable(sts, c.replicas), "%v of %d", c.v, c.replicas)
	}
}

// TestReleasable: a batch is released as far as maxUnavailable allows: released pods not yet updated
// and available, and pods unavailable anyway, count against it.
func TestReleasable(t *testing.T) {
	now := time.Now()
	pod := func(name, rev string, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	}
	for _, c := range []struct {
		name      string
		mu        *intstr.IntOrString
		partition int32
		pods      []*corev1.Pod
		want      int32
	}{
		{"all available, default 1", nil, 5, nil, 1},
		{"all available, maxUnavailable 3: a batch of 3 in one write", &intstr.IntOrString{Type: intstr.Int, IntVal: 3}, 5, nil, 3},
		{"one released pod not yet rolled", &intstr.IntOrString{Type: intstr.Int, IntVal: 3}, 4, []*corev1.Pod{pod("web-4", "r1", true)}, 2},
		{"one released pod rolled, not Ready", &intstr.IntOrString{Type: intstr.Int, IntVal: 2}, 4, []*corev1.Pod{pod("web-4", "r2", false)}, 1},
		{"a pod below the partition down", &intstr.IntOrString{Type: intstr.Int, IntVal: 2}, 5, []*corev1.Pod{pod("web-0", "r1", false)}, 1},
		{"budget used up", nil, 4, []*corev1.Pod{pod("web-4", "r2", false)}, 0},
		{"more down than allowed", nil, 5, []*corev1.Pod{pod("web-0", "r1", false), pod("web-1", "r1", false)}, 0},
	} {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
		sts.Status.UpdateRevision = "r2"
		if c.mu != nil {
			sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: c.mu}
		}
		pods := map[string]*corev1.Pod{}
		for i := range 5 {
			rev := "r1"
			if int32(i) >= c.partition {
				rev = "r2"
			}
			pods[fmt.Sprintf("web-%d", i)] = pod(fmt.Sprintf("web-%d", i), rev, true)
		}
		for _, p := range c.pods {
			pods[p.Name] = p
		}
		assert.Equal(t, c.want, releasable(sts, pods, 5, c.partition, now), c.name)
	}
}
