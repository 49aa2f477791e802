package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// buildPod makes the pod of an identity from a pod template (the one of its revision), faithfully:
// the template's labels, annotations and volumes are kept (seed code dropped them), the selector's
// matchLabels and the operator's labels are added, one volume per claim template is added (replacing a
// template volume of the same name) and hostname/subdomain give the identity a stable DNS name.
func buildPod(sc *clusterv1alpha1.StatefulCluster, template *corev1.PodTemplateSpec, revision, identity string) *corev1.Pod {
	t := template.DeepCopy()
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	if sc.Spec.Selector != nil {
		for k, v := range sc.Spec.Selector.MatchLabels {
			labels[k] = v
		}
	}
	labels[clusterv1alpha1.ClusterNameLabel] = sc.Name
	labels[clusterv1alpha1.IdentityLabel] = identity
	labels[clusterv1alpha1.RevisionLabel] = revision

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            identity,
			Namespace:       sc.Namespace,
			Labels:          labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*controllerRef(sc)},
		},
		Spec: t.Spec,
	}
	if sc.Spec.ServiceName != "" {
		pod.Spec.Hostname = identity
		pod.Spec.Subdomain = sc.Spec.ServiceName
	}
	for _, ct := range sc.Spec.VolumeClaimTemplates {
		vol := corev1.Volume{Name: ct.Metadata.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(sc, ct.Metadata.Name, identity)},
		}}
		replaced := false
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vol.Name {
				pod.Spec.Volumes[i] = vol
				replaced = true
			}
		}
		if !replaced {
			pod.Spec.Volumes = append(pod.Spec.Volumes, vol)
		}
	}
	return pod
}

// controllerRef is the owner reference that makes the StatefulCluster the controller of a pod.
func controllerRef(sc *clusterv1alpha1.StatefulCluster) *metav1.OwnerReference {
	return &metav1.OwnerReference{
		APIVersion:         clusterv1alpha1.GroupVersion.String(),
		Kind:               "StatefulCluster",
		Name:               sc.Name,
		UID:                sc.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}
