package permdoc

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/permissions.md from deploy/*.yaml, the markers' comments and docs/permissions-reasons.yaml")

// TestPermissionsDoc fails when docs/permissions.md no longer lists exactly the rules and policies of
// deploy/*.yaml with their reasons (another branch changed a marker, a config/ role or a policy):
// `cd e2e && go test ./permdoc -update` regenerates it.
func TestPermissionsDoc(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	doc, err := Render(root)
	require.NoError(t, err)
	page := filepath.Join(root, Page)
	if *update {
		require.NoError(t, os.WriteFile(page, []byte(doc.Markdown), 0o644))
	}
	got, err := os.ReadFile(page)
	require.NoError(t, err)
	require.Equal(t, doc.Markdown, string(got), "%s is stale: run `make manifests` (or `cd e2e && go test ./permdoc -update`)", Page)
}

// TestEveryPermissionHasAReason fails on a rule or policy nobody explained: a comment above its
// `+kubebuilder:rbac` marker, or an entry in docs/permissions-reasons.yaml for config/ roles.
func TestEveryPermissionHasAReason(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	doc, err := Render(root)
	require.NoError(t, err)
	require.Empty(t, doc.Missing, "rules without a reason: add a comment above the marker, or a line in %s:\n%s",
		ReasonsFile, strings.Join(doc.Missing, "\n"))
}

// TestMarkerReasons pins how a marker's reason is found: the comment above a run of markers explains
// each of them; a comment after a run explains only the markers below it.
func TestMarkerReasons(t *testing.T) {
	dir := t.TempDir()
	src := `package x

// Reads its own kind.
// +kubebuilder:rbac:groups=a.io,resources=things,verbs=get;list
// +kubebuilder:rbac:groups=a.io,resources=things/status,verbs=update
// Its CRD, to tell an uninstall.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get

// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get
`
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "op"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "op", "x.go"), []byte(src), 0o644))
	mks, err := loadMarkers(dir, []string{"op"})
	require.NoError(t, err)
	require.Len(t, mks, 4)
	require.Equal(t, "Reads its own kind.", mks[0].reason)
	require.Equal(t, "Reads its own kind.", mks[1].reason)
	require.Equal(t, "Its CRD, to tell an uninstall.", mks[2].reason)
	require.Equal(t, "", mks[3].reason)
	require.True(t, mks[3].namespaced)
	require.Equal(t, []string{""}, mks[3].groups)
}

// TestRenderPoliciesAndReasons renders a small manifest: a marker's comment explains its rule, the
// reasons file explains a config/ role, and a ValidatingAdmissionPolicy naming the ServiceAccount is
// listed under it with its binding and message; a rule nobody explains is reported missing.
func TestRenderPoliciesAndReasons(t *testing.T) {
	root := t.TempDir()
	write := func(path, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(text), 0o644))
	}
	write("x-operator/main.go", `package main

// It takes Leases of its own kind only.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create
`)
	write(ReasonsFile, `"{op}-metrics-reader": "For a scraper."`+"\n")
	write("deploy/x-operator.yaml", `apiVersion: v1
kind: ServiceAccount
metadata:
  name: x-operator-controller-manager
  namespace: x-operator-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: x-operator-manager-role
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create, get]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: x-operator-metrics-reader}
rules: [{nonResourceURLs: [/metrics], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: x-operator-manager-rolebinding
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: x-operator-manager-role}
subjects:
- {kind: ServiceAccount, name: x-operator-controller-manager, namespace: x-operator-system}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: x-operator-leases
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [coordination.k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [leases]}
  matchConditions:
  - name: operator
    expression: request.userInfo.username == 'system:serviceaccount:x-operator-system:x-operator-controller-manager'
  validations:
  - expression: object.metadata.namespace != 'kube-system'
    message: the operator writes no Lease in kube-system (leader elections of the control plane)
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: x-operator-leases
spec:
  policyName: x-operator-leases
  validationActions: [Deny]
`)
	doc, err := render(root, []string{"x-operator"})
	require.NoError(t, err)
	md := doc.Markdown
	require.Contains(t, md, "| x-operator-manager-role | cluster-wide | coordination.k8s.io | `leases` |  | `create`, `get` | It takes Leases of its own kind only. |")
	require.Contains(t, md, "| x-operator-metrics-reader | where bound | (non-resource) | `/metrics` | | `get` | For a scraper. |")
	require.Contains(t, md, "| x-operator-leases | CREATE,UPDATE leases | Fail | x-operator-leases (Deny) | the operator writes no Lease in kube-system (leader elections of the control plane) |")
	require.Less(t, strings.Index(md, "x-operator-leases |"), strings.Index(md, "### Roles shipped unbound"), "the policy is listed under its ServiceAccount")
	require.Equal(t, []string{"deploy/x-operator.yaml: x-operator-manager-role /nodes"}, doc.Missing)
	require.Contains(t, md, "| x-operator-manager-role | cluster-wide | core | `nodes` |  | `get` | "+NoReason+" |")
}
