package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// crdWith is a CRD whose spec.template.spec.volumeClaimTemplates items are item.
func crdWith(item apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	obj := func(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
	}
	list := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &item}}
	root := obj(map[string]apiextensionsv1.JSONSchemaProps{"spec": obj(map[string]apiextensionsv1.JSONSchemaProps{
		"template": obj(map[string]apiextensionsv1.JSONSchemaProps{"spec": obj(map[string]apiextensionsv1.JSONSchemaProps{
			"volumeClaimTemplates": list})})})})
	return &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1",
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &root}}}}}
}

func quantityMap() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{
		Schema: &apiextensionsv1.JSONSchemaProps{XIntOrString: true}}}
}

func TestBound(t *testing.T) {
	item := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"metadata": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string"}}},
		"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"resources": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"limits": quantityMap(), "requests": quantityMap()}}}},
	}}
	crd := crdWith(item)
	require.NoError(t, bound(crd))
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	list := root.Properties["spec"].Properties["template"].Properties["spec"].Properties["volumeClaimTemplates"]
	require.NotNil(t, list.MaxItems, "the list is bounded")
	assert.Equal(t, int64(MaxClaimTemplates), *list.MaxItems)
	got := list.Items.Schema
	assert.Equal(t, int64(63), *got.Properties["metadata"].Properties["name"].MaxLength)
	for _, m := range []string{"limits", "requests"} {
		assert.Equal(t, int64(64), *got.Properties["spec"].Properties["resources"].Properties[m].AdditionalProperties.Schema.MaxLength, m)
	}
}

func TestBoundRefusesAnotherShape(t *testing.T) {
	noResources := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"metadata": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string"}}}}}
	err := bound(crdWith(noResources))
	require.Error(t, err, "a schema without the fields to bound is an error, not silently left unbounded")
	assert.Contains(t, err.Error(), `spec.resources`)
	assert.Error(t, bound(&apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1"}}}}))
}
