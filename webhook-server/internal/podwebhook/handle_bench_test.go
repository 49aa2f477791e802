package podwebhook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// BenchmarkHandle is the CPU cost of one admission of a pod a StatefulSingleton selects (Wrapper
// mutation and JSON patch), without transport: `make bench` measures the end-to-end admission latency,
// this isolates the handler's share.
func BenchmarkHandle(b *testing.B) {
	r := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(ss("db", time.Now(), map[string]string{"app": "db"})).Build()
	m := &Mutator{Reader: r, Decoder: admission.NewDecoder(scheme())}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", Command: []string{"/c"}}}}}
	req := request(&testing.T{}, admissionv1.Create, pod)
	b.ReportAllocs()
	for b.Loop() {
		if resp := m.Handle(b.Context(), req); !resp.Allowed {
			b.Fatal(resp.Result)
		}
	}
}

// BenchmarkServeConcurrent50 serves admission reviews over TLS (HTTP/1.1, as the API server calls a
// webhook with HTTP/2 off) in bursts of 50 concurrent requests: the webhook server's own share of the
// admission latency that `make bench` measures through the API server. BENCH_HTTP2=1 offers HTTP/2,
// as the webhook-server does by default: the API server then multiplexes the burst on one connection
// instead of a TLS handshake per request in flight (measured under load: 182 ms vs 36 ms per burst).
func BenchmarkServeConcurrent50(b *testing.B) {
	r := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(ss("db", time.Now(), map[string]string{"app": "db"})).Build()
	m := &Mutator{Reader: r, Decoder: admission.NewDecoder(scheme())}
	srv := httptest.NewUnstartedServer(&webhook.Admission{Handler: m})
	srv.EnableHTTP2 = os.Getenv("BENCH_HTTP2") != ""
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = 25 // the API server's transport default
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", Command: []string{"/c"}}}}}
	raw, _ := json.Marshal(pod)
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "ns", Object: runtime.RawExtension{Raw: raw}},
	})
	var lat []time.Duration
	var mu sync.Mutex
	for b.Loop() {
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				start := time.Now()
				resp, err := c.Post(srv.URL, "application/json", bytes.NewReader(review))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
