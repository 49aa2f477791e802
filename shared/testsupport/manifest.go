package testsupport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
	applied := 0
	for _, obj := range manifestObjects(t, path) {
		if !slices.Contains(kinds, obj.GetKind()) {
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

// DocumentsManifestPermissions fails unless the "## Permissions" section of the Markdown page doc
// names every resource that a ClusterRole or Role of the manifest grants, in backticks each of the
// names a rule is restricted to (resourceNames), and each ValidatingAdmissionPolicy: a rule added to
// the markers or a policy to config/ without its reason on the page fails the module's unit tests.
// Non-resource rules (/metrics) are the metrics section's.
func DocumentsManifestPermissions(t *testing.T, doc, manifest string) {
	t.Helper()
	page, err := os.ReadFile(doc)
	require.NoError(t, err)
	_, section, found := bytes.Cut(page, []byte("\n## Permissions\n"))
	require.True(t, found, "%s has no \"## Permissions\" section", doc)
	if end := bytes.Index(section, []byte("\n## ")); end >= 0 {
		section = section[:end]
	}
	for _, obj := range manifestObjects(t, manifest) {
		switch obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			assert.Contains(t, string(section), "`"+obj.GetName()+"`", "%s: the Permissions section does not name policy %s", doc, obj.GetName())
		case "ClusterRole", "Role":
			rules, _, _ := unstructured.NestedSlice(obj.Object, "rules")
			for _, r := range rules {
				rule, _ := r.(map[string]any)
				names, _, _ := unstructured.NestedStringSlice(rule, "resourceNames")
				for _, name := range names {
					assert.Contains(t, string(section), "`"+name+"`", "%s: the Permissions section does not name %s (%s %s)", doc, name, obj.GetKind(), obj.GetName())
				}
				resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
				for _, res := range resources {
					base, _, _ := strings.Cut(res, "/")
					if len(names) == 0 {
						assert.Contains(t, string(section), base, "%s: the Permissions section does not say why %s %s grants %s", doc, obj.GetKind(), obj.GetName(), res)
					}
				}
			}
		}
	}
}

// manifestObjects are the objects of a multi-document YAML manifest, in order.
func manifestObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			require.NoError(t, err, "decoding %s", path)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}
