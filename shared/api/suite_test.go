//go:build integration

// Package api_test checks the five CRDs against a real kube-apiserver and etcd (envtest): the seed
// examples apply and read back with their defaults, and invalid objects are refused with an error that
// names the offending field.
package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// k8sClient talks to the test API server; tests may use it directly (e.g. for updates).
var k8sClient client.Client

// restConfig reaches the test API server, for requests the client does not make (a Table).
var restConfig *rest.Config

// operators own one CRD family each; their generated CRDs are what the API server serves here.
var operators = []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the integration tests through `make test-integration`, which builds kube-apiserver and etcd and sets it")
		return 1
	}
	var crdDirs []string
	for _, op := range operators {
		crdDirs = append(crdDirs, filepath.Join("..", "..", op, "config", "crd", "bases"))
	}
	env := &envtest.Environment{CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	restConfig = cfg
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fmt.Fprintf(os.Stderr, "building scheme: %v\n", err)
		return 1
	}
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "building client: %v\n", err)
		return 1
	}
	return m.Run()
}

// decode turns one YAML document into an unstructured object, defaulting its namespace to "default".
func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object), "test YAML must parse")
	require.NotEmpty(t, obj.GetKind(), "test YAML must have a kind")
	if obj.GetNamespace() == "" && obj.GetKind() != "Namespace" {
		obj.SetNamespace(metav1.NamespaceDefault)
	}
	return obj
}

// ensureNamespace creates the namespace if it does not exist yet.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// applyYAML creates the object described by doc (its namespace is created when missing) and returns it
// as stored, or the API server's error. Objects are removed when the test ends.
func applyYAML(t *testing.T, doc string) (*unstructured.Unstructured, error) {
	t.Helper()
	obj := decode(t, doc)
	ensureNamespace(t, obj.GetNamespace())
	if err := k8sClient.Create(t.Context(), obj); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), obj)
	})
	return obj, nil
}

// mustApply is applyYAML that fails the test on error.
func mustApply(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj, err := applyYAML(t, doc)
	require.NoError(t, err)
	return obj
}

// mustReject asserts that creating doc fails as invalid and that the error names each wanted string
// (typically the offending field's path, e.g. "spec.leaseDurationSeconds").
func mustReject(t *testing.T, doc string, wantInError ...string) {
	t.Helper()
	_, err := applyYAML(t, doc)
	require.Error(t, err, "the API server accepted an invalid object")
	require.True(t, apierrors.IsInvalid(err) || apierrors.IsBadRequest(err), "want an Invalid error, got: %v", err)
	for _, want := range wantInError {
		require.Contains(t, err.Error(), want)
	}
}

// readBack returns the object as the API server stores it (defaults applied).
func readBack(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	require.NoError(t, k8sClient.Get(t.Context(), client.ObjectKeyFromObject(obj), got))
	return got
}

// field returns the value at a dotted path (e.g. "spec.check.periodSeconds") of obj, failing if absent.
func field(t *testing.T, obj *unstructured.Unstructured, path string) any {
	t.Helper()
	v, found, err := unstructured.NestedFieldNoCopy(obj.Object, strings.Split(path, ".")...)
	require.NoError(t, err)
	require.True(t, found, "field %s missing in %s", path, obj.GetName())
	return v
}
