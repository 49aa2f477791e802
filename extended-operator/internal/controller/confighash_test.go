package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestReferences(t *testing.T) {
	local := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: local("init-secret")}}}}},
		Containers: []corev1.Container{{
			Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: local("cm"), Optional: ptr.To(true)}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: local("s")}}},
				{Name: "C", Value: "plain"},
			},
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: local("cm")}}},
		}},
		Volumes: []corev1.Volume{
			{Name: "v1", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: local("vol-cm"), Optional: ptr.To(true)}}},
			{Name: "v2", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-s"}}},
			{Name: "v3", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: local("proj-cm")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: local("proj-s")}},
			}}}},
			{Name: "v4", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	assert.Equal(t, []reference{
		{kind: "ConfigMap", name: "cm"}, // optional in one use, required in another: required
		{kind: "ConfigMap", name: "proj-cm"},
		{kind: "ConfigMap", name: "vol-cm", optional: true},
		{kind: "Secret", name: "init-secret"},
		{kind: "Secret", name: "proj-s"},
		{kind: "Secret", name: "s"},
		{kind: "Secret", name: "vol-s"},
	}, references(spec))
}

func TestDebouncer(t *testing.T) {
	d := newDebouncer(2*time.Second, 10*time.Second)
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	t0 := time.Unix(1000, 0)
	wait, first := d.wait(key, "a", t0, -1)
	assert.Equal(t, 2*time.Second, wait)
	assert.Equal(t, t0, first)
	wait, _ = d.wait(key, "b", t0.Add(time.Second), -1) // a new edit restarts the quiet period
	assert.Equal(t, 2*time.Second, wait)
	wait, _ = d.wait(key, "b", t0.Add(3*time.Second), -1)
	assert.Zero(t, wait)
	for i := range 20 { // edits that never stop: bounded by maxDelay from the first
		wait, _ = d.wait(key, string(rune('c'+i)), t0.Add(time.Duration(4+i)*500*time.Millisecond), -1)
	}
	assert.Zero(t, wait, "the burst started more than maxDelay ago")
	d.forget(key)
	wait, first = d.wait(key, "z", t0.Add(time.Minute), -1)
	assert.Equal(t, 2*time.Second, wait)
	assert.Equal(t, t0.Add(time.Minute), first)

	// The ExtendedStatefulSet's own quiet period replaces the default; 0 applies at once.
	d.forget(key)
	wait, _ = d.wait(key, "q", t0, 500*time.Millisecond)
	assert.Equal(t, 500*time.Millisecond, wait)
	d.forget(key)
	wait, _ = d.wait(key, "q", t0, 0)
	assert.Zero(t, wait)
}
