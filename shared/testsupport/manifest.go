package testsupport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyManifest creates the objects of the given kinds from a rendered multi-document manifest
// (deploy/<operator>.yaml), as they ship: a permissions test then measures the RBAC and admission
// policies users install, not copies of them. Objects that exist already (cluster-scoped ones from an
// earlier test of the run) are left as they are.
func (s *Suite) ApplyManifest(t *testing.T, path string, kinds ...string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	applied := 0
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "decoding %s", path)
		}
		if len(obj.Object) == 0 || !slices.Contains(kinds, obj.GetKind()) {
			continue
		}
		if err := s.Client.Create(t.Context(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating %s %s from %s", obj.GetKind(), obj.GetName(), path)
		}
		applied++
	}
	require.NotZero(t, applied, "no object of kinds %v in %s", kinds, path)
}

// As returns a client of the suite's API server that impersonates user (rest.Config.Impersonate),
// e.g. an operator's ServiceAccount, "system:serviceaccount:<namespace>:<name>", with the groups the
// API server gives every ServiceAccount.
func (s *Suite) As(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: s.Scheme})
	require.NoError(t, err)
	return c
}

// ServiceAccountGroups are the groups the API server puts a ServiceAccount's requests in.
func ServiceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// PolicyWait is how long an admission policy just created may take to be enforced (the API server
// compiles it from its informer).
const PolicyWait = 20 * time.Second
