package wrapper

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
)

// kubeletExpand is the kubelet's $(VAR) expansion (k8s.io/kubernetes third_party/forked/golang/expansion,
// Expand with MappingFuncFor), restated here as the reference the wrapper must agree with: the module does
// not depend on k8s.io/kubernetes. An undefined or empty reference stays as written, $$ is $, and an
// unclosed "$(" is kept and scanning goes on after the "(".
func kubeletExpand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		rest := s[i+1:]
		r, size := utf8.DecodeRuneInString(rest)
		switch r {
		case '$':
			b.WriteByte('$')
			i += size
		case '(':
			end := strings.IndexByte(rest[1:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := rest[1 : 1+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 1 + end + 1
		default:
			b.WriteString("$" + string(r))
			i += size
		}
	}
	return b.String()
}

// kubeletEnv is the environment the kubelet gives a container: each value expanded against the variables
// defined before it (a later definition of a name replaces the earlier one).
func kubeletEnv(vars []corev1.EnvVar) map[string]string {
	env := map[string]string{}
	for _, v := range vars {
		env[v.Name] = kubeletExpand(v.Value, env)
	}
	return env
}

// FuzzExpand checks the wrapper's expansion against the kubelet's on any valid UTF-8 string (the API
// server only stores those) and any environment: the app must get exactly the argv it would get unwrapped.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "$(A)", "x$(A)y", "$$(A)", "$$$(A)", "$(MISSING)", "$(A", "$()", "$A", "$",
		"a b,c\"d'", "$(A)$(A)$$", "$(B)", "$(A)$", "é$é", "$((A))", "$(A $(B)", "$(A$$"} {
		f.Add(s, "A", "1", "B", "$(A)")
	}
	f.Fuzz(func(t *testing.T, s, k1, v1, k2, v2 string) {
		if !utf8.ValidString(s) {
			return // the API server rejects such strings; the kubelet's rune decoding differs on them
		}
		env := map[string]string{k1: v1, k2: v2}
		delete(env, "") // the API server refuses an empty variable name
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		if got, want := Expand(s, lookup), kubeletExpand(s, env); got != want {
			t.Fatalf("Expand(%q) = %q, the kubelet gives %q (env %q)", s, got, want, env)
		}
	})
}

// FuzzWrappedArgv runs the whole path of a Wrapper-mode container's argv: the webhook's mutation, the
// kubelet's expansion of the container's environment (ORIGINAL_ENTRYPOINT included), the wrapper's
// decoding and expansion. The argv the app finally gets must be the one the kubelet would have given it
// unwrapped, with the same environment, and the mutation must not leave the app's own variables changed.
func FuzzWrappedArgv(f *testing.F) {
	f.Add(`["/bin/sh","-c","echo $(NAME) $$HOME"]`, uint8(1), "NAME", "db", "OTHER", "$(NAME)-x")
	f.Add(`["/app","--flag=a b","--json={\"k\":[1,2]}","'quoted'"]`, uint8(1), "A", "", "B", "")
	f.Add(`["/app","$(ORIGINAL_ENTRYPOINT)","$(A)"]`, uint8(2), "ORIGINAL_ENTRYPOINT", "spoof", "A", "$$")
	f.Add(`["/app","$(A","$$(A)","$$$(A)","$"]`, uint8(0), "A", "v", "B", "")
	f.Add(`["/app","\u00e9\u0000\n\t"]`, uint8(3), "A", "v", "A", "w")
	f.Fuzz(func(t *testing.T, argvJSON string, split uint8, k1, v1, k2, v2 string) {
		var argv []string
		if json.Unmarshal([]byte(argvJSON), &argv) != nil || len(argv) == 0 {
			return // a pod's command and args are JSON string arrays; this one is not one
		}
		if k1 == "" || k2 == "" {
			return // the API server refuses an empty variable name
		}
		if k1 == singletonv1.EnvOriginalEntrypoint || k2 == singletonv1.EnvOriginalEntrypoint {
			// The app's own ORIGINAL_ENTRYPOINT is replaced by the wrapper's (documented); compare the
			// rest only.
			return
		}
		n := min(int(split)%(len(argv)+1), len(argv))
		if n == 0 {
			n = 1 // a command is needed for the wrapper (without one the pod falls back to the gate)
		}
		app := corev1.Container{Name: "app", Image: "app:1", Command: argv[:n], Args: argv[n:],
			Env: []corev1.EnvVar{{Name: k1, Value: v1}, {Name: k2, Value: v2}}}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{app}},
		}
		unwrappedEnv := kubeletEnv(app.Env)
		want := make([]string, len(argv))
		for j, a := range argv {
			want[j] = kubeletExpand(a, unwrappedEnv)
		}
		checkWrapped(t, pod, podmutation.Config{}, want, unwrappedEnv)
	})
}

// FuzzWrappedImageArgv is FuzzWrappedArgv for a container without command, wrapped with its image's
// ENTRYPOINT and CMD (as the webhook reads them from the registry): the app must get what the runtime
// would have run unwrapped — the image's ENTRYPOINT and CMD verbatim (the kubelet never expands them),
// the pod's args, when set, instead of CMD and expanded by the kubelet's rules.
func FuzzWrappedImageArgv(f *testing.F) {
	f.Add(`["/bin/sh","-c","exec app $(NAME) $$HOME $HOME"]`, `["$(NAME)"]`, `[]`, "NAME", "db")
	f.Add(`["docker-entrypoint.sh"]`, `["postgres"]`, `["postgres","-c","x=$(NAME)","$$(NAME)"]`, "NAME", "v")
	f.Add(`[]`, `["redis-server","$(A"]`, `[]`, "A", "")
	f.Add(`[]`, `[]`, `["/app","$(A)"]`, "A", "$$")
	f.Fuzz(func(t *testing.T, entrypointJSON, cmdJSON, argsJSON, key, value string) {
		var entrypoint, cmd, args []string
		if json.Unmarshal([]byte(entrypointJSON), &entrypoint) != nil || json.Unmarshal([]byte(cmdJSON), &cmd) != nil ||
			json.Unmarshal([]byte(argsJSON), &args) != nil || key == "" || key == singletonv1.EnvOriginalEntrypoint {
			return
		}
		env := map[string]string{}
		if len(args) > 0 {
			env = kubeletEnv([]corev1.EnvVar{{Name: key, Value: value}})
		}
		want := slices.Clone(entrypoint)
		if len(args) > 0 {
			for _, a := range args {
				want = append(want, kubeletExpand(a, env))
			}
		} else {
			want = append(want, cmd...)
		}
		if len(want) == 0 {
			return // the runtime would not start it; the pod falls back to the gate (podmutation's tests)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1", Args: args,
				Env: []corev1.EnvVar{{Name: key, Value: value}}}}},
		}
		images := map[string]podmutation.ImageEntrypoint{"app": {Entrypoint: entrypoint, Cmd: cmd}}
		checkWrapped(t, pod, podmutation.Config{Images: images}, want, kubeletEnv(pod.Spec.Containers[0].Env))
	})
}

// checkWrapped mutates pod (one app container) in Wrapper mode with cfg, then runs what the kubelet and
// the wrapper do with the wrapped container: its environment expanded, ORIGINAL_ENTRYPOINT decoded and
// each element expanded by the wrapper. The app must get want, and the environment unwrappedEnv.
func checkWrapped(t *testing.T, pod *corev1.Pod, cfg podmutation.Config, want []string, unwrappedEnv map[string]string) {
	t.Helper()
	cfg.SidecarImage, cfg.GrantURL = "sidecar", "https://g/v1/grant"
	ss := &singletonv1.StatefulSingleton{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"},
		Spec: singletonv1.StatefulSingletonSpec{HoldMode: singletonv1.HoldModeWrapper}}
	mutated := podmutation.Mutate(pod, ss, cfg)
	i := slices.IndexFunc(mutated.Spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })
	if i < 0 {
		t.Fatal("the app container is gone")
	}
	wrapped := mutated.Spec.Containers[i]
	if !slices.Equal(wrapped.Command, []string{singletonv1.WrapperBinary}) || len(wrapped.Args) != 0 {
		t.Fatalf("the container is not wrapped (%s): command %q args %q", mutated.Annotations[singletonv1.AnnotationHoldFallback], wrapped.Command, wrapped.Args)
	}
	wrappedEnv := kubeletEnv(wrapped.Env)
	got, err := podmutation.OriginalArgv(wrappedEnv[singletonv1.EnvOriginalEntrypoint])
	if err != nil {
		t.Fatalf("the wrapper cannot decode its argv: %v", err)
	}
	lookup := appLookup(func(k string) (string, bool) { v, ok := wrappedEnv[k]; return v, ok })
	for j := range got {
		got[j] = Expand(got[j], lookup)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the app gets %q wrapped, %q unwrapped", got, want)
	}
	delete(wrappedEnv, singletonv1.EnvOriginalEntrypoint) // the wrapper unsets it before the exec
	for k, v := range unwrappedEnv {
		if wrappedEnv[k] != v {
			t.Fatalf("variable %s is %q wrapped, %q unwrapped", k, wrappedEnv[k], v)
		}
	}
}
