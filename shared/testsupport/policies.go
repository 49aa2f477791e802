package testsupport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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
