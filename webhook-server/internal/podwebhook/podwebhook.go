// Package podwebhook is the StatefulSingleton pod mutation: at pod CREATE it finds the StatefulSingleton
// that selects the pod and returns the JSON patch computed by shared/podmutation, with the ENTRYPOINT
// and CMD of the images of its containers without command (package imageconfig, within a budget). Pods no
// StatefulSingleton selects get an empty patch. UPDATE is never registered (and is allowed unchanged
// should it arrive), so label and annotation changes of managed pods are never blocked or rewritten.
package podwebhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig"
)

// Path is where the webhook is served (the seed's path).
const Path = "/mutate--v1-pod"

// failurePolicy=Fail: a StatefulSingleton namespace must not get unheld pods while the webhook is down.
// The namespaceSelector (namespaces labelled apps.statefulsingleton.com/enabled=true, never kube-system
// or the operator's own) is added by a kustomize patch in config/webhook, as the marker cannot express it.
// +kubebuilder:webhook:path=/mutate--v1-pod,mutating=true,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=mpod.kb.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent,reinvocationPolicy=Never

// Mutator answers the pod admission requests.
type Mutator struct {
	// Reader reads StatefulSingletons (the manager's cache).
	Reader client.Reader
	// Decoder decodes the pod of a request.
	Decoder admission.Decoder
	// Config names the images and the grant endpoint injected in Wrapper mode.
	Config podmutation.Config
	// GrantCA, when set, returns the current grant CA (it follows the operator's rotated Secret) and
	// overrides Config.GrantCA.
	GrantCA func() string
	// Images reads the image configs of containers without command, within its budget; nil: none are
	// read, and such pods are held with the scheduling gate.
	Images ImageResolver
	// Keychain returns the credentials the kubelet would pull the pod's images with (its
	// imagePullSecrets and its ServiceAccount's); nil: anonymous.
	Keychain func(ctx context.Context, pod *corev1.Pod) authn.Keychain
	// NodeLabels returns the labels of a node, when known, for the platform of a pod that names its
	// node (imageconfig.Platform); nil: the pod's nodeSelector, else the webhook's own platform.
	NodeLabels func(name string) (map[string]string, bool)
}

// ImageResolver reads image configs (imageconfig.Resolver).
type ImageResolver interface {
	Resolve(ctx context.Context, req imageconfig.Request) (imageconfig.Config, error)
}

// Handle implements admission.Handler.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("only pod creation is mutated")
	}
	pod := &corev1.Pod{}
	if err := m.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	ss, err := Match(ctx, m.Reader, req.Namespace, pod.Labels)
	if err != nil {
		// Fail closed: without knowing whether a singleton selects the pod, it must not start unheld.
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if ss == nil {
		return admission.Allowed("no StatefulSingleton selects this pod")
	}
	cfg := m.Config
	if m.GrantCA != nil {
		cfg.GrantCA = m.GrantCA()
	}
	cfg.Images = m.imageEntrypoints(ctx, req.Namespace, pod, ss)
	mutated := podmutation.Mutate(pod, ss, cfg)
	raw, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	logf.FromContext(ctx).V(1).Info("Admitting a pod of a StatefulSingleton", "statefulSingleton", ss.Name,
		"holdMode", mutated.Annotations[singletonv1.AnnotationHoldMode])
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// imageEntrypoints reads, concurrently and each within the resolver's budget, the image configs of the
// containers whose entrypoint decides the hold (podmutation.NeedsImageConfig).
func (m *Mutator) imageEntrypoints(ctx context.Context, namespace string, pod *corev1.Pod, ss *singletonv1.StatefulSingleton) map[string]podmutation.ImageEntrypoint {
	need := podmutation.NeedsImageConfig(pod, ss)
	if m.Images == nil || len(need) == 0 {
		return nil
	}
	var keychain authn.Keychain
	if m.Keychain != nil {
		keychain = m.Keychain(ctx, pod)
	}
	platform := imageconfig.Platform(pod, m.NodeLabels)
	found := make([]podmutation.ImageEntrypoint, len(need))
	var wg sync.WaitGroup
	for i, c := range need {
		wg.Go(func() {
			cfg, err := m.Images.Resolve(ctx, imageconfig.Request{Namespace: namespace, Image: c.Image, Platform: platform, Keychain: keychain})
			if err != nil {
				found[i] = podmutation.ImageEntrypoint{Unknown: err.Error()}
				return
			}
			found[i] = podmutation.ImageEntrypoint{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd}
		})
	}
	wg.Wait()
	images := make(map[string]podmutation.ImageEntrypoint, len(need))
	for i, c := range need {
		images[c.Name] = found[i]
	}
	return images
}

// Match returns the StatefulSingleton of namespace whose selector matches podLabels, or nil. When
// several match (overlapping selectors), the oldest wins — by creation time, then name — so every
// replica of the webhook and the operator pick the same one.
func Match(ctx context.Context, r client.Reader, namespace string, podLabels map[string]string) (*singletonv1.StatefulSingleton, error) {
	var list singletonv1.StatefulSingletonList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing StatefulSingletons in %s: %w", namespace, err)
	}
	var matches []*singletonv1.StatefulSingleton
	for i := range list.Items {
		ss := &list.Items[i]
		selector, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
		if err != nil || selector.Empty() {
			continue // refused by the CRD's validation; never treat it as "select everything"
		}
		if selector.Matches(labels.Set(podLabels)) {
			matches = append(matches, ss)
		}
	}
	if len(matches) == 0 {
		return nil, nil
	}
	return slices.MinFunc(matches, func(a, b *singletonv1.StatefulSingleton) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	}), nil
}
