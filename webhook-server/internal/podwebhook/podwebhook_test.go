package podwebhook

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = singletonv1.AddToScheme(s)
	return s
}

func ss(name string, created time.Time, labels map[string]string) *singletonv1.StatefulSingleton {
	return &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       singletonv1.StatefulSingletonSpec{Selector: metav1.LabelSelector{MatchLabels: labels}},
	}
}

func TestMatchPicksTheOldestDeterministically(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	objs := []client.Object{
		ss("newer", t0.Add(time.Minute), map[string]string{"app": "db"}),
		ss("b-same-second", t0, map[string]string{"app": "db"}),
		ss("a-same-second", t0, map[string]string{"app": "db", "tier": "x"}),
		ss("other", t0.Add(-time.Hour), map[string]string{"app": "web"}),
		ss("empty", t0.Add(-time.Hour), nil),
	}
	r := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(objs...).Build()
	for labels, want := range map[string]map[string]string{
		"a-same-second": {"app": "db", "tier": "x"},
		"b-same-second": {"app": "db"},
		"other":         {"app": "web"},
		"":              {"app": "nothing"},
	} {
		got, err := Match(t.Context(), r, "ns", want)
		require.NoError(t, err)
		if labels == "" {
			assert.Nil(t, got, "an empty selector never selects everything")
			continue
		}
		require.NotNil(t, got)
		assert.Equal(t, labels, got.Name)
	}
}

func request(t *testing.T, op admissionv1.Operation, pod *corev1.Pod) admission.Request {
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: "ns", Object: runtime.RawExtension{Raw: raw},
	}}
}

func TestHandle(t *testing.T) {
	r := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(ss("db", time.Now(), map[string]string{"app": "db"})).Build()
	m := &Mutator{Reader: r, Decoder: admission.NewDecoder(scheme())}
	pod := func(app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", Command: []string{"/c"}}}}}
	}

	resp := m.Handle(t.Context(), request(t, admissionv1.Create, pod("web")))
	assert.True(t, resp.Allowed)
	assert.Empty(t, resp.Patches, "a pod no singleton selects gets an empty patch")
	assert.Nil(t, resp.PatchType)

	resp = m.Handle(t.Context(), request(t, admissionv1.Update, pod("db")))
	assert.True(t, resp.Allowed)
	assert.Empty(t, resp.Patches, "UPDATE is never mutated")

	resp = m.Handle(t.Context(), request(t, admissionv1.Create, pod("db")))
	assert.True(t, resp.Allowed)
	assert.NotEmpty(t, resp.Patches)
}

func TestHandleFailsClosedWhenSingletonsCannotBeRead(t *testing.T) {
	// No StatefulSingleton type in the scheme: listing fails.
	r := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	m := &Mutator{Reader: r, Decoder: admission.NewDecoder(scheme())}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	resp := m.Handle(t.Context(), request(t, admissionv1.Create, pod))
	assert.False(t, resp.Allowed)
}
