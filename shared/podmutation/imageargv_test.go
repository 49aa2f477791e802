package podmutation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// wrappedArgv is the argv the wrapper receives in the container's ORIGINAL_ENTRYPOINT, after the
// kubelet's own expansion of env values turned every $$ into $.
func wrappedArgv(t *testing.T, c *corev1.Container) []string {
	t.Helper()
	require.NotNil(t, c)
	require.Equal(t, []string{singletonv1.WrapperBinary}, c.Command)
	assert.Empty(t, c.Args)
	value, ok := env(*c, singletonv1.EnvOriginalEntrypoint)
	require.True(t, ok)
	argv, err := OriginalArgv(strings.ReplaceAll(value, "$$", "$"))
	require.NoError(t, err)
	return argv
}

// A container without command is wrapped with its image's argv, built as the kubelet builds it: the
// pod's args replace CMD, ENTRYPOINT stays; without args, ENTRYPOINT + CMD. The image's own $ reach
// the wrapper doubled, so its $(VAR) expansion (which the kubelet never applies to the image's argv)
// gives them back verbatim; the pod's args keep their single $ and are expanded as the kubelet would.
func TestMutateWrapsContainersWithoutCommandWithTheirImagesArgv(t *testing.T) {
	shell := ImageEntrypoint{Entrypoint: []string{"/bin/sh", "-c", "exec app $HOME $(X)"}}
	for name, tc := range map[string]struct {
		args []string
		img  ImageEntrypoint
		want []string
	}{
		"entrypoint and cmd":       {img: ImageEntrypoint{Entrypoint: []string{"docker-entrypoint.sh"}, Cmd: []string{"postgres"}}, want: []string{"docker-entrypoint.sh", "postgres"}},
		"args replace cmd":         {args: []string{"-c", "$(PORT)"}, img: ImageEntrypoint{Entrypoint: []string{"docker-entrypoint.sh"}, Cmd: []string{"postgres"}}, want: []string{"docker-entrypoint.sh", "-c", "$(PORT)"}},
		"cmd only":                 {img: ImageEntrypoint{Cmd: []string{"redis-server", "--port", "6379"}}, want: []string{"redis-server", "--port", "6379"}},
		"args with cmd only":       {args: []string{"/bin/app", "x"}, img: ImageEntrypoint{Cmd: []string{"redis-server"}}, want: []string{"/bin/app", "x"}},
		"shell-form entrypoint":    {img: shell, want: []string{"/bin/sh", "-c", "exec app $$HOME $$(X)"}},
		"entrypoint only, no args": {img: ImageEntrypoint{Entrypoint: []string{"/app"}}, want: []string{"/app"}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig
			cfg.Images = map[string]ImageEntrypoint{"app": tc.img}
			pod := appPod(container("app", nil, tc.args...), container("side", []string{"/side"}, "$(A)"))
			require.Equal(t, []corev1.Container{pod.Spec.Containers[0]}, NeedsImageConfig(pod, singleton(singletonv1.HoldModeWrapper, 30, nil)))
			got := Mutate(pod, singleton(singletonv1.HoldModeWrapper, 30, nil), cfg)
			assert.Equal(t, "Wrapper", got.Annotations[singletonv1.AnnotationHoldMode])
			assert.Empty(t, got.Annotations[singletonv1.AnnotationHoldFallback])
			assert.Empty(t, got.Spec.SchedulingGates)
			assert.Equal(t, tc.want, wrappedArgv(t, findContainer(got.Spec.Containers, "app")))
			assert.Equal(t, []string{"/side", "$(A)"}, wrappedArgv(t, findContainer(got.Spec.Containers, "side")), "a container with command is wrapped as before")
			again := Mutate(got, singleton(singletonv1.HoldModeWrapper, 30, nil), Config{SidecarImage: cfg.SidecarImage, GrantURL: cfg.GrantURL})
			assert.Equal(t, got, again, "idempotent, also without the image configs")
		})
	}
}

// Without a usable image config the pod falls back to the scheduling gate, and the annotation says why.
func TestMutateFallsBackWhenTheImagesArgvIsNotKnown(t *testing.T) {
	for name, tc := range map[string]struct {
		images map[string]ImageEntrypoint
		reason string
	}{
		"not looked up": {nil, `container "app" has no command in the pod spec and the webhook cannot read its image's entrypoint`},
		"lookup failed": {map[string]ImageEntrypoint{"app": {Unknown: "the registry said 401"}}, `container "app" has no command in the pod spec and its image's entrypoint is not known: the registry said 401; held with the scheduling gate instead`},
		"no argv":       {map[string]ImageEntrypoint{"app": {}}, `container "app" has no command in the pod spec and its image "app:1" has neither ENTRYPOINT nor CMD`},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig
			cfg.Images = tc.images
			got := Mutate(appPod(container("app", nil)), singleton(singletonv1.HoldModeWrapper, 30, nil), cfg)
			assert.Equal(t, "SchedulingGate", got.Annotations[singletonv1.AnnotationHoldMode])
			assert.Contains(t, got.Annotations[singletonv1.AnnotationHoldFallback], tc.reason)
			assert.Equal(t, []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}}, got.Spec.SchedulingGates)
			assert.Empty(t, got.Spec.Containers[0].Command)
		})
	}
}

// The webhook reads image configs only when they decide the hold.
func TestNeedsImageConfig(t *testing.T) {
	wrapper := singleton(singletonv1.HoldModeWrapper, 30, nil)
	withInit := appPod(container("app", nil))
	withInit.Spec.InitContainers = []corev1.Container{container("migrate", []string{"/migrate"})}
	admitted := appPod(container("app", nil))
	admitted.Annotations = map[string]string{singletonv1.AnnotationHoldMode: "SchedulingGate"}
	assert.Empty(t, NeedsImageConfig(appPod(container("app", []string{"/app"})), wrapper), "every container has a command")
	assert.Empty(t, NeedsImageConfig(appPod(container("app", nil)), singleton(singletonv1.HoldModeSchedulingGate, 30, nil)), "SchedulingGate mode")
	assert.Empty(t, NeedsImageConfig(withInit, wrapper), "init containers force the scheduling gate anyway")
	assert.Empty(t, NeedsImageConfig(admitted, wrapper), "a pod admitted with the scheduling gate keeps it")
	need := NeedsImageConfig(appPod(container("a", nil), container("b", []string{"/b"}), container("c", nil, "x")), wrapper)
	assert.Equal(t, []string{"a", "c"}, []string{need[0].Name, need[1].Name})
}
