// Package v1 contains the StatefulSingleton API of statefulops, served as apps.openshift.statefulsingleton.com/v1.
// +kubebuilder:object:generate=true
// +groupName=apps.openshift.statefulsingleton.com
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "apps.openshift.statefulsingleton.com", Version: "v1"}

	// SchemeBuilder registers the types of this API with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this API to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
