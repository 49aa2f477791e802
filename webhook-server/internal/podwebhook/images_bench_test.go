//go:build bench

package podwebhook

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	admissionv1 "k8s.io/api/admission/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig/registrytest"
)

// BenchmarkAdmitImageWithoutCommand is the handler's admission latency for a pod without command
// against a loopback registry (go-containerregistry's pkg/registry): warm, the image config is cached
// (every pod after the first of an image); cold, every admission starts with an empty cache and reads
// the manifest and the config blob (the first pod of an image; a real registry adds its network round
// trips). Run: go test -tags bench -run '^$' -bench AdmitImageWithoutCommand ./internal/podwebhook/
func BenchmarkAdmitImageWithoutCommand(b *testing.B) {
	reg := registrytest.New(b, "", "")
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	reg.Push(b, "postgres:14", registrytest.Image(b, v1.Config{Entrypoint: []string{"docker-entrypoint.sh"}, Cmd: []string{"postgres"}}, amd64))
	req := request(&testing.T{}, admissionv1.Create, imagePod(reg.Host+"/postgres:14"))
	for _, warm := range []bool{true, false} {
		name := map[bool]string{true: "warm", false: "cold"}[warm]
		b.Run(name, func(b *testing.B) {
			m := imageMutator(b, imageconfig.Options{})
			if warm {
				admit(b, m, imagePod(reg.Host+"/postgres:14"))
			}
			var lat []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				if !warm {
					m.Images = imageconfig.New(imageconfig.Options{})
				}
				start := time.Now()
				resp := m.Handle(context.Background(), req)
				lat = append(lat, time.Since(start))
				if !resp.Allowed || len(resp.Patches) == 0 {
					b.Fatal(resp.Result)
				}
			}
			// Checked outside the timed loop: the pod got Wrapper mode.
			if got := admit(b, m, imagePod(reg.Host+"/postgres:14")); got.Annotations[singletonv1.AnnotationHoldMode] != "Wrapper" {
				b.Fatalf("held with %s: %s", got.Annotations[singletonv1.AnnotationHoldMode], got.Annotations[singletonv1.AnnotationHoldFallback])
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
