//go:build e2e

package singleton

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/statefulops/statefulops/e2e/framework"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

func TestMain(m *testing.M) { framework.MainWith(m, watchHoldModes) }

// watchHoldModes follows every pod the webhook admits with a hold during the suite and, after it,
// prints how many were held in each mode: the share in Wrapper mode, and for the others whether the
// test asked for SchedulingGate or the webhook fell back to it (and why).
func watchHoldModes(context.Context) func() {
	var mu sync.Mutex
	modes := map[types.UID]string{}
	record := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mode := pod.Annotations[singletonv1.AnnotationHoldMode]
		if reason := pod.Annotations[singletonv1.AnnotationHoldFallback]; reason != "" {
			mode += " (fallback: " + reason + ")"
		}
		mu.Lock()
		modes[pod.UID] = mode
		mu.Unlock()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(framework.Clientset, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = singletonv1.LabelManaged + "=true" }))
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: record}); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: hold modes not followed:", err)
		return nil
	}
	stop := make(chan struct{})
	factory.Start(stop)
	return func() {
		close(stop)
		factory.Shutdown()
		mu.Lock()
		defer mu.Unlock()
		counts := map[string]int{}
		for _, mode := range modes {
			counts[mode]++
		}
		var parts []string
		for _, mode := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%s %d", mode, counts[mode]))
		}
		wrapper := counts[string(singletonv1.HoldModeWrapper)]
		share := 0.0
		if len(modes) > 0 {
			share = 100 * float64(wrapper) / float64(len(modes))
		}
		fmt.Fprintf(os.Stderr, "e2e: SINGLETON hold modes over the suite: %d pods held, %.0f %% in Wrapper mode (%s)\n",
			len(modes), share, strings.Join(parts, "; "))
	}
}
