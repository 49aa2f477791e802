package testsupport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// InstallManifestPolicies creates the ValidatingAdmissionPolicies and their bindings of a rendered
// manifest (deploy/<operator>.yaml) as they ship, so a test exercises the very objects users apply.
// Objects that already exist are kept (they are cluster-scoped: one install per envtest). It returns
// the policies' names.
func InstallManifestPolicies(t *testing.T, c client.Client, manifest string) []string {
	t.Helper()
	raw, err := os.ReadFile(manifest)
	require.NoError(t, err)
	var names []string
	dec := utilyaml.NewDocumentDecoder(io.NopCloser(bytes.NewReader(raw)))
	buf := make([]byte, len(raw)+1)
	for {
		n, err := dec.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		doc := buf[:n]
		var meta struct{ Kind string }
		require.NoError(t, yaml.Unmarshal(doc, &meta))
		var obj client.Object
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		default:
			continue
		}
		require.NoError(t, yaml.Unmarshal(doc, obj))
		obj.SetNamespace("") // cluster-scoped; kustomize's namespace transformer sets it anyway
		if err := c.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating %s %s", meta.Kind, obj.GetName())
		}
		if meta.Kind == "ValidatingAdmissionPolicy" {
			names = append(names, obj.GetName())
		}
	}
	require.NotEmpty(t, names, "%s ships no ValidatingAdmissionPolicy", manifest)
	return names
}

// InstallOperatorIdentity creates what an operator's manifest gives its identity, named as
// deploy/<operator>.yaml names them: the ServiceAccount <operator>-controller-manager in
// <operator>-system, the ClusterRole of configDir/rbac/role.yaml (generated from the RBAC markers) bound
// to it, the unbound ClusterRole configDir/secretreader/cluster_role.yaml as
// <operator>-secret-reader, and the admission policies of manifest; it waits until the API server
// enforces those (probe, a write as the ServiceAccount they refuse, is refused by a policy). Once per
// envtest: the objects are cluster-scoped and kept. It returns the ServiceAccount and the rest.Config
// impersonating it.
func InstallOperatorIdentity(t *testing.T, s *Suite, operator, configDir, manifest string, probe func(c client.Client) error) (*corev1.ServiceAccount, *rest.Config) {
	t.Helper()
	ctx := context.Background()
	load := func(path, name string) *rbacv1.ClusterRole {
		raw, err := os.ReadFile(filepath.Join(configDir, path))
		require.NoError(t, err)
		role := &rbacv1.ClusterRole{}
		require.NoError(t, yaml.Unmarshal(raw, role))
		role.Name = name
		return role
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operator + "-system"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operator + "-controller-manager", Namespace: ns.Name}}
	objs := []client.Object{
		ns, sa,
		load("rbac/role.yaml", operator+"-manager-role"),
		load("secretreader/cluster_role.yaml", operator+"-secret-reader"),
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: operator + "-manager-rolebinding"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operator + "-manager-role"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: sa.Name}},
		},
	}
	for _, o := range objs {
		if err := s.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	policies := InstallManifestPolicies(t, s.Client, manifest)
	cfg := rest.CopyConfig(s.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	c, err := client.New(cfg, client.Options{Scheme: s.Scheme})
	require.NoError(t, err)
	// The API server loads policies asynchronously.
	require.Eventually(t, func() bool {
		err := probe(c)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, 30*time.Second, 20*time.Millisecond, "the policies %v are in force", policies)
	return sa, cfg
}
