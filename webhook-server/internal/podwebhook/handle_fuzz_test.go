package podwebhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
)

// FuzzHandle feeds arbitrary request bodies to the admission handler, as the API server would relay
// them: decode, match, mutate, JSON patch. A body that is not a pod is refused with 400 (never allowed
// unheld); a pod no singleton selects is allowed unchanged; a selected pod gets a patch that, applied
// to the very bytes the API server sent, gives exactly the pod podmutation.Mutate computes.
func FuzzHandle(f *testing.F) {
	for _, raw := range []string{
		`{"metadata":{"name":"p","labels":{"app":"db"}},"spec":{"containers":[{"name":"c","image":"i","command":["/c"],"args":["$(X) a/b~c"]}]}}`,
		`{"metadata":{"name":"p","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
		`{"metadata":{"labels":{"app":"db"},"annotations":{"a/b~1":"x"}},"spec":{"containers":[{"name":"c","image":"i"}],"initContainers":[{"name":"i","image":"i"}]}}`,
		`{"metadata":{"labels":{"app":"db"}},"spec":{"containers":[{"name":"c","image":"i","command":["/c"]}],"volumes":[{"name":"v","emptyDir":{}}],"affinity":{"nodeAffinity":{}}},"unknownField":1}`,
		`{"kind":"Pod","apiVersion":"v1","metadata":{"labels":{"app":"db"}},"spec":{}}`,
		`[]`, `null`, `{"metadata":{"labels":{"app":1}}}`, ``,
	} {
		f.Add([]byte(raw), true)
	}
	f.Add([]byte(`{"metadata":{"labels":{"app":"db"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`), false)

	ss := ss("db", time.Now(), map[string]string{"app": "db"})
	m := &Mutator{
		Reader:  fake.NewClientBuilder().WithScheme(scheme()).WithObjects(ss).Build(),
		Decoder: admission.NewDecoder(scheme()),
		Config:  podmutation.Config{SidecarImage: "sidecar:1", GrantURL: "https://grant/v1/grant"},
	}
	f.Fuzz(func(t *testing.T, raw []byte, create bool) {
		op := admissionv1.Update
		if create {
			op = admissionv1.Create
		}
		resp := m.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: op, Namespace: "ns", Object: runtime.RawExtension{Raw: raw},
		}})
		if !create {
			if !resp.Allowed || len(resp.Patches) > 0 {
				t.Fatalf("UPDATE must be allowed unchanged: %+v", resp.Result)
			}
			return
		}
		pod := &corev1.Pod{}
		if err := m.Decoder.DecodeRaw(runtime.RawExtension{Raw: raw}, pod); err != nil {
			if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest {
				t.Fatalf("an undecodable body (%v) must be refused with 400, got allowed=%v %+v", err, resp.Allowed, resp.Result)
			}
			return
		}
		if !resp.Allowed {
			t.Fatalf("a decodable pod was refused: %+v", resp.Result)
		}
		if pod.Labels["app"] != "db" {
			if len(resp.Patches) > 0 {
				t.Fatalf("a pod no singleton selects was patched: %v", resp.Patches)
			}
			return
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("the decoder took a body encoding/json refuses: %v", err)
		}
		ops, _ := json.Marshal(resp.Patches)
		patched, err := applyPatch(doc, ops)
		if err != nil {
			t.Fatalf("the patch does not apply to the request's object: %v\npatch: %v", err, resp.Patches)
		}
		got := &corev1.Pod{}
		data, _ := json.Marshal(patched)
		if err := json.Unmarshal(data, got); err != nil {
			t.Fatalf("the patched object is no pod: %v", err)
		}
		want := podmutation.Mutate(pod, ss, m.Config)
		if !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("patched pod differs from the mutated pod:\npatched: %+v\nwanted:  %+v", got.Spec, want.Spec)
		}
		if got.Annotations[singletonv1.AnnotationHoldMode] == "" {
			t.Fatal("a selected pod was admitted without a hold")
		}
	})
}

// patchOp is one operation of an RFC 6902 JSON patch.
type patchOp struct {
	Operation string `json:"op"`
	Path      string `json:"path"`
	Value     any    `json:"value,omitempty"`
}

// applyPatch applies the add, remove and replace operations of an RFC 6902 patch (JSON) to a decoded
// JSON document (the only operations the admission package's patches use). Written here so that the
// test needs no module the webhook does not already depend on directly.
func applyPatch(doc any, patch []byte) (any, error) {
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, err
	}
	for _, op := range ops {
		var err error
		if doc, err = applyOp(doc, op); err != nil {
			return nil, fmt.Errorf("%s %s: %w", op.Operation, op.Path, err)
		}
	}
	return doc, nil
}

func applyOp(doc any, op patchOp) (any, error) {
	if op.Path == "" {
		if op.Operation == "remove" {
			return nil, nil
		}
		return roundTrip(op.Value)
	}
	if !strings.HasPrefix(op.Path, "/") {
		return nil, fmt.Errorf("path %q is no JSON pointer", op.Path)
	}
	tokens := strings.Split(op.Path[1:], "/")
	for i, tok := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	value, err := roundTrip(op.Value)
	if err != nil {
		return nil, err
	}
	return setIn(doc, tokens, op.Operation, value)
}

// setIn returns doc with the operation applied at the path tokens.
func setIn(doc any, tokens []string, operation string, value any) (any, error) {
	last := len(tokens) == 1
	switch d := doc.(type) {
	case map[string]any:
		key := tokens[0]
		if !last {
			child, ok := d[key]
			if !ok {
				return nil, fmt.Errorf("no member %q", key)
			}
			var err error
			d[key], err = setIn(child, tokens[1:], operation, value)
			return d, err
		}
		_, exists := d[key]
		switch operation {
		case "add":
			d[key] = value
		case "replace":
			if !exists {
				return nil, fmt.Errorf("replace of missing member %q", key)
			}
			d[key] = value
		case "remove":
			if !exists {
				return nil, fmt.Errorf("remove of missing member %q", key)
			}
			delete(d, key)
		default:
			return nil, fmt.Errorf("unexpected operation %q", operation)
		}
		return d, nil
	case []any:
		if last && operation == "add" && tokens[0] == "-" {
			return append(d, value), nil
		}
		i, err := strconv.Atoi(tokens[0])
		if err != nil || i < 0 || i > len(d) || (i == len(d) && !(last && operation == "add")) {
			return nil, fmt.Errorf("bad index %q of %d elements", tokens[0], len(d))
		}
		if !last {
			d[i], err = setIn(d[i], tokens[1:], operation, value)
			return d, err
		}
		switch operation {
		case "add":
			return append(d[:i], append([]any{value}, d[i:]...)...), nil
		case "replace":
			d[i] = value
			return d, nil
		case "remove":
			return append(d[:i], d[i+1:]...), nil
		}
		return nil, fmt.Errorf("unexpected operation %q", operation)
	default:
		return nil, fmt.Errorf("cannot descend into %T at %q", doc, tokens[0])
	}
}

// roundTrip turns a patch value into the generic form encoding/json decodes into.
func roundTrip(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(data, &out)
}
