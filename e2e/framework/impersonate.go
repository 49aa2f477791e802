//go:build e2e

package framework

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountUser is the username the API server gives ServiceAccount namespace/name.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ImpersonatedConfig is RESTConfig acting as ServiceAccount namespace/name, with the groups the API
// server gives every ServiceAccount token, so the requests are authorized and admitted exactly as the
// ServiceAccount's own would be (ValidatingAdmissionPolicies see the same userInfo).
func ImpersonatedConfig(namespace, name string) *rest.Config {
	cfg := rest.CopyConfig(RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: ServiceAccountUser(namespace, name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}

// ImpersonatedClientset is a clientset acting as ServiceAccount namespace/name (ImpersonatedConfig).
func ImpersonatedClientset(t *testing.T, namespace, name string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(ImpersonatedConfig(namespace, name))
	require.NoError(t, err)
	return cs
}

// CanIList is `kubectl auth can-i --list --as=<user>` (cluster-wide and in namespace, if not empty),
// for failure messages: what the identity may do, as the API server sees it.
func CanIList(ctx context.Context, user string, namespaces ...string) string {
	var out strings.Builder
	for _, ns := range append([]string{""}, namespaces...) {
		args := []string{"auth", "can-i", "--list", "--as=" + user}
		if ns != "" {
			args = append(args, "-n", ns)
			out.WriteString("\n-- namespace " + ns + ":\n")
		}
		s, err := Kubectl().Run(ctx, args...)
		if err != nil {
			s += "\n(kubectl: " + err.Error() + ")"
		}
		out.WriteString(s)
	}
	return out.String()
}

// CreateForTest creates obj as admin and deletes it when the test ends: the cluster-scoped and
// kube-system objects a test aims at, which no test namespace's deletion would remove.
func CreateForTest(t *testing.T, obj client.Object) {
	t.Helper()
	require.NoError(t, Client.Create(t.Context(), obj), "create %T %s", obj, obj.GetName())
	t.Cleanup(func() { _ = Client.Delete(context.Background(), obj) })
}
