package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// TestApplyZoneEnvAndLabels checks the zone facts applyZone gives a StatefulSet (ES-10): ours (labels
// fissile.cloudfoundry.org/az-name and az-index in the selector and on the pods; KUBE_AZ and AZ_INDEX,
// 1-based, replacing the template's own) and quarks' compatibility aliases (labels
// quarks.cloudfoundry.org/az-name and az-index, 0-based, not in the selector; BOSH_AZ and CF_OPERATOR_AZ
// in every container and init container, unless the container sets them itself: a user's value, or
// valueFrom, is kept). Without zones nothing is added.
func TestApplyZoneEnvAndLabels(t *testing.T) {
	fromLabel := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['bosh-az']"}}
	build := func() *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
			Spec: appsv1.StatefulSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
					Spec: corev1.PodSpec{
						InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{
							{Name: "BOSH_AZ", ValueFrom: fromLabel}, {Name: "KUBE_AZ", Value: "user"}, {Name: "X", Value: "1"},
						}}},
						Containers: []corev1.Container{
							{Name: "main"},
							{Name: "side", Env: []corev1.EnvVar{{Name: "CF_OPERATOR_AZ", Value: "user"}, {Name: "AZ_INDEX", Value: "user"}}},
						},
					},
				},
			},
		}
	}

	sts := build()
	applyZone(sts, zone{name: "b", index: 2, nodeLabel: extendedv1alpha1.DefaultZoneNodeLabel})
	own := map[string]string{extendedv1alpha1.ZoneLabel: "b", extendedv1alpha1.ZoneIndexLabel: "2"}
	quarks := map[string]string{"quarks.cloudfoundry.org/az-name": "b", "quarks.cloudfoundry.org/az-index": "1"}
	assert.Equal(t, mergeMaps(map[string]string{"app": "db"}, own), sts.Spec.Selector.MatchLabels, "quarks' labels stay out of the selector")
	assert.Equal(t, mergeMaps(mergeMaps(map[string]string{"app": "db"}, own), quarks), sts.Spec.Template.Labels)
	assert.Equal(t, mergeMaps(mergeMaps(map[string]string{"app": "db"}, own), quarks), sts.Labels)

	pod := sts.Spec.Template.Spec
	assert.Equal(t, []corev1.EnvVar{
		{Name: "BOSH_AZ", ValueFrom: fromLabel}, {Name: "X", Value: "1"},
		{Name: "KUBE_AZ", Value: "b"}, {Name: "AZ_INDEX", Value: "2"}, {Name: "CF_OPERATOR_AZ", Value: "b"},
	}, pod.InitContainers[0].Env, "init: our KUBE_AZ replaces the user's, the user's BOSH_AZ stays")
	assert.Equal(t, []corev1.EnvVar{
		{Name: "KUBE_AZ", Value: "b"}, {Name: "AZ_INDEX", Value: "2"}, {Name: "BOSH_AZ", Value: "b"}, {Name: "CF_OPERATOR_AZ", Value: "b"},
	}, pod.Containers[0].Env, "main: all four")
	assert.Equal(t, []corev1.EnvVar{
		{Name: "CF_OPERATOR_AZ", Value: "user"},
		{Name: "KUBE_AZ", Value: "b"}, {Name: "AZ_INDEX", Value: "2"}, {Name: "BOSH_AZ", Value: "b"},
	}, pod.Containers[1].Env, "side: our AZ_INDEX replaces the user's, the user's CF_OPERATOR_AZ stays")

	unzoned := build()
	applyZone(unzoned, zone{})
	assert.Equal(t, build(), unzoned, "without zones the StatefulSet is left as built")
}
