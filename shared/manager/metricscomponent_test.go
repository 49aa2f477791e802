package manager

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// operators whose config/prometheus enables the ServiceMonitor component (shared/config/prometheus).
var prometheusOperators = []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"}

// renderKustomization renders dir with the kubectl the repository uses (`make manifests`'s).
func renderKustomization(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	kubeBin := os.Getenv("STATEFULOPS_KUBE_BIN")
	if kubeBin == "" {
		t.Skip("STATEFULOPS_KUBE_BIN is not set (the Makefile exports it): no kubectl to render kustomizations with")
	}
	out, err := exec.Command(filepath.Join(kubeBin, "kubectl"), "kustomize", dir).Output()
	require.NoError(t, err, "kubectl kustomize %s", dir)
	return decodeObjects(t, out)
}

// decodeObjects decodes a multi-document YAML stream into objects keyed kind/namespace/name.
func decodeObjects(t *testing.T, raw []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			require.ErrorIs(t, err, io.EOF)
			return objs
		}
		if len(u.Object) > 0 {
			objs[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = u
		}
	}
}

func str(t *testing.T, u *unstructured.Unstructured, fields ...string) string {
	t.Helper()
	v, found, err := unstructured.NestedString(u.Object, fields...)
	require.NoError(t, err)
	require.True(t, found, "%s %s has %v", u.GetKind(), u.GetName(), fields)
	return v
}

// Each operator's config/prometheus is deploy/<operator>.yaml plus, and only plus, a cert-manager Issuer
// and Certificate for its metrics Service's DNS names, the Deployment serving that certificate
// (--metrics-cert-path, the Secret mounted), and a ServiceMonitor that scrapes the Service's https port
// over HTTPS, verifying the certificate with the Secret's ca.crt under the Service's DNS name. The
// shipped metrics-reader Role grants get on services/metrics of exactly that Service.
func TestPrometheusComponentScrapesTheMetricsServiceWithItsCA(t *testing.T) {
	for _, op := range prometheusOperators {
		t.Run(op, func(t *testing.T) {
			rendered := renderKustomization(t, filepath.Join("..", "..", op, "config", "prometheus"))
			deployRaw, err := os.ReadFile(filepath.Join("..", "..", "deploy", op+".yaml"))
			require.NoError(t, err)
			deployed := decodeObjects(t, deployRaw)
			ns, svcName := op+"-system", op+"-controller-manager-metrics-service"

			added := map[string]bool{}
			for key := range rendered {
				if _, ok := deployed[key]; !ok {
					added[key] = true
				}
			}
			for key := range deployed {
				assert.Contains(t, rendered, key, "the component keeps every object of deploy/%s.yaml", op)
			}
			monitorKey, certKey, issuerKey := "ServiceMonitor/"+ns+"/"+svcName, "Certificate/"+ns+"/"+svcName, "Issuer/"+ns+"/"+svcName
			assert.Equal(t, map[string]bool{monitorKey: true, certKey: true, issuerKey: true}, added,
				"the component adds its ServiceMonitor, Certificate and Issuer, named after the metrics Service")
			assert.NotContains(t, deployRaw, []byte("ServiceMonitor"), "deploy/%s.yaml ships no ServiceMonitor by default", op)

			svc := rendered["Service/"+ns+"/"+svcName]
			require.NotNil(t, svc)
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			require.Len(t, ports, 1)
			assert.Equal(t, "https", ports[0].(map[string]any)["name"])

			cert := rendered[certKey]
			secret := str(t, cert, "spec", "secretName")
			assert.Equal(t, svcName, secret)
			dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			assert.Equal(t, []string{svcName + "." + ns + ".svc", svcName + "." + ns + ".svc.cluster.local"}, dnsNames)
			assert.Equal(t, svcName, str(t, cert, "spec", "issuerRef", "name"))

			monitor := rendered[monitorKey]
			endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
			require.Len(t, endpoints, 1)
			ep := &unstructured.Unstructured{Object: endpoints[0].(map[string]any)}
			assert.Equal(t, "https", str(t, ep, "port"))
			assert.Equal(t, "https", str(t, ep, "scheme"))
			assert.Equal(t, "/metrics", str(t, ep, "path"))
			assert.Contains(t, dnsNames, str(t, ep, "tlsConfig", "serverName"), "Prometheus checks a name the certificate carries")
			assert.Equal(t, secret, str(t, ep, "tlsConfig", "ca", "secret", "name"), "Prometheus trusts the certificate's CA")
			assert.Equal(t, "ca.crt", str(t, ep, "tlsConfig", "ca", "secret", "key"))
			_, insecure, _ := unstructured.NestedBool(ep.Object, "tlsConfig", "insecureSkipVerify")
			assert.False(t, insecure)
			selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
			for k, v := range selector {
				assert.Equal(t, v, svc.GetLabels()[k], "the ServiceMonitor selects the metrics Service")
			}

			deploy := rendered["Deployment/"+ns+"/"+op+"-controller-manager"]
			require.NotNil(t, deploy)
			containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
			manager := &unstructured.Unstructured{Object: containers[0].(map[string]any)}
			require.Equal(t, "manager", str(t, manager, "name"))
			args, _, _ := unstructured.NestedStringSlice(manager.Object, "args")
			assert.Contains(t, args, "--metrics-cert-path=/tmp/k8s-metrics-server/metrics-certs")
			mounts, _, _ := unstructured.NestedSlice(manager.Object, "volumeMounts")
			assert.Contains(t, mounts, map[string]any{"name": "metrics-cert", "mountPath": "/tmp/k8s-metrics-server/metrics-certs", "readOnly": true})
			volumes, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "volumes")
			assert.True(t, slices.ContainsFunc(volumes, func(v any) bool {
				vol := &unstructured.Unstructured{Object: v.(map[string]any)}
				name, _, _ := unstructured.NestedString(vol.Object, "name")
				s, _, _ := unstructured.NestedString(vol.Object, "secret", "secretName")
				return name == "metrics-cert" && s == secret
			}), "the Deployment mounts the certificate's Secret")

			role := rendered["Role/"+ns+"/"+op+"-metrics-reader"]
			require.NotNil(t, role, "the manifest ships the metrics-reader Role")
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			assert.Equal(t, []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"services/metrics"},
				"resourceNames": []any{svcName}, "verbs": []any{"get"}}}, rules,
				"the reader Role opens services/metrics of the metrics Service and nothing else")
			for key, obj := range deployed {
				if obj.GetKind() == "ClusterRole" {
					rules, _, _ := unstructured.NestedSlice(obj.Object, "rules")
					for _, r := range rules {
						_, hasURLs := r.(map[string]any)["nonResourceURLs"]
						assert.False(t, hasURLs, "%s grants no nonResourceURL", key)
					}
				}
			}
		})
	}
}
