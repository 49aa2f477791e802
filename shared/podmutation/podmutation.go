// Package podmutation computes how a pod selected by a StatefulSingleton is admitted: the readiness gate,
// the labels, the anti-affinity against the other pods of the same singleton, the termination grace
// period, and the start hold (Wrapper or SchedulingGate). It holds pure functions over *corev1.Pod — no
// client, no HTTP — so the webhook server only looks the singleton up and turns the result into a patch.
//
// Mutate is idempotent: mutating an already mutated pod changes nothing.
package podmutation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// Config is what the mutation needs beyond the pod and its StatefulSingleton.
type Config struct {
	// SidecarImage is the image of the status-sidecar container (binary /status-sidecar), which also
	// installs itself as the app containers' entrypoint wrapper (its postStart hook).
	SidecarImage string
	// GrantURL is the singleton operator's grant endpoint the sidecar long-polls (https://…/v1/grant).
	GrantURL string
	// GrantCA is the PEM CA bundle the sidecar trusts for GrantURL; empty means the system roots.
	GrantCA string
	// Images holds, per container name, what the webhook read from the image config of a container
	// without command (NeedsImageConfig names them). Per admission; nil when the webhook reads no image
	// config. A container without command and without an entry here, or whose entry gives no argv, is
	// held with the scheduling gate instead.
	Images map[string]ImageEntrypoint
}

// ImageEntrypoint is the ENTRYPOINT and CMD of a container's image config, or why they are not known.
type ImageEntrypoint struct {
	Entrypoint []string
	Cmd        []string
	// Unknown, when set, says why the image config could not be read (the fallback reason).
	Unknown string
}

// imageArgv returns the argv the container runtime runs for a container without command, exactly as
// the kubelet builds it: the image's ENTRYPOINT followed by the pod's args when it sets any, else by the
// image's CMD. The parts taken from the image config get every $ doubled: the kubelet expands $(VAR)
// only in the pod's command and args, never in the image's, and the wrapper expands the whole argv.
// Empty when the image has neither ENTRYPOINT nor CMD (the runtime would refuse to start it).
func imageArgv(c *corev1.Container, img ImageEntrypoint) []string {
	escape := func(parts []string) []string {
		out := make([]string, len(parts))
		for i, p := range parts {
			out[i] = strings.ReplaceAll(p, "$", "$$")
		}
		return out
	}
	argv := escape(img.Entrypoint)
	if len(c.Args) > 0 {
		return append(argv, c.Args...)
	}
	return append(argv, escape(img.Cmd)...)
}

// defaultGracePeriod is Kubernetes' default terminationGracePeriodSeconds and the CRD's default
// terminationGracePeriod.
const defaultGracePeriod = 30

// Mutate returns a copy of pod admitted as a member of ss: the readiness gate, the managed and
// per-singleton labels, the seed's managed annotation, preferred anti-affinity (weight 100, per node)
// against the other pods of the same singleton, the termination grace period of ss, and the start hold
// of ss.spec.holdMode. A container without command is wrapped with the argv of its image config
// (cfg.Images, read by the webhook). A Wrapper pod whose argv cannot be known exactly (a container
// without command whose image config is not in cfg.Images, or gives no argv; or init containers, which
// would run before the hold) is held with the scheduling gate instead, and the annotation
// AnnotationHoldFallback says why. pod itself is not modified.
func Mutate(pod *corev1.Pod, ss *singletonv1.StatefulSingleton, cfg Config) *corev1.Pod {
	out := pod.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	value := SingletonLabelValue(ss.Name)
	out.Labels[singletonv1.LabelManaged] = "true"
	out.Labels[singletonv1.LabelSingleton] = value
	out.Annotations[singletonv1.AnnotationManaged] = "true"
	// Only the operator releases a pod, by writing these on the existing pod. A new pod carrying them
	// (a manifest copied from a released pod) would otherwise count as released and get its start grant
	// at once, beside the running one.
	delete(out.Annotations, singletonv1.AnnotationStartGranted)
	delete(out.Annotations, singletonv1.AnnotationEpoch)

	addReadinessGate(out)
	addAntiAffinity(out, value, ss.Spec.AntiAffinity == singletonv1.AntiAffinityRequired)
	setGracePeriod(out, &ss.Spec)

	mode := holdMode(out, ss)
	if mode == singletonv1.HoldModeWrapper {
		if reason := wrapperUnsupported(out, cfg.Images); reason != "" {
			mode = singletonv1.HoldModeSchedulingGate
			out.Annotations[singletonv1.AnnotationHoldFallback] = reason
		}
	}
	out.Annotations[singletonv1.AnnotationHoldMode] = string(mode)
	if mode == singletonv1.HoldModeWrapper {
		addWrapperHold(out, cfg)
	} else {
		addSchedulingGate(out)
	}
	return out
}

// holdMode is the hold of ss.spec.holdMode (Wrapper by default), or the one the pod already got.
func holdMode(pod *corev1.Pod, ss *singletonv1.StatefulSingleton) singletonv1.HoldMode {
	// A pod admitted earlier keeps the hold it got (a re-run must not switch modes half-way). Any other
	// value is not ours to keep: the operator would not recognise the hold.
	if prev := singletonv1.HoldMode(pod.Annotations[singletonv1.AnnotationHoldMode]); prev == singletonv1.HoldModeWrapper || prev == singletonv1.HoldModeSchedulingGate {
		return prev
	}
	if ss.Spec.HoldMode == "" {
		return singletonv1.HoldModeWrapper
	}
	return ss.Spec.HoldMode
}

// NeedsImageConfig returns the containers of pod whose image config decides whether Mutate can hold it
// in Wrapper mode: the app containers without command, when the pod would otherwise get the wrapper
// hold. None when the pod is held with the scheduling gate whatever their images say.
func NeedsImageConfig(pod *corev1.Pod, ss *singletonv1.StatefulSingleton) []corev1.Container {
	if holdMode(pod, ss) != singletonv1.HoldModeWrapper {
		return nil
	}
	if wrapperConflict(pod) != "" {
		return nil
	}
	var need []corev1.Container
	for _, c := range pod.Spec.Containers {
		if c.Name != singletonv1.SidecarContainerName && len(c.Command) == 0 {
			need = append(need, c)
		}
	}
	return need
}

// SingletonLabelValue returns the value of LabelSingleton for a StatefulSingleton name. Object names may
// be up to 253 characters but label values only 63, so long names are shortened with a hash suffix.
func SingletonLabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:52] + "-" + hex.EncodeToString(sum[:])[:10]
}

func addReadinessGate(pod *corev1.Pod) {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == singletonv1.ReadinessGate {
			return
		}
	}
	pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: singletonv1.ReadinessGate})
}

// AntiAffinityTerm is the preferred term added to every managed pod: weight 100 per node against the
// managed pods of the same singleton (seed 000 used managed=true alone, which also repels the pods of
// unrelated singletons).
func AntiAffinityTerm(singletonLabelValue string) corev1.WeightedPodAffinityTerm {
	return corev1.WeightedPodAffinityTerm{
		Weight: 100,
		PodAffinityTerm: corev1.PodAffinityTerm{
			TopologyKey: corev1.LabelHostname,
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: singletonv1.LabelManaged, Operator: metav1.LabelSelectorOpIn, Values: []string{"true"}},
				{Key: singletonv1.LabelSingleton, Operator: metav1.LabelSelectorOpIn, Values: []string{singletonLabelValue}},
			}},
		},
	}
}

// addAntiAffinity adds the singleton's preferred anti-affinity term, and with required the same term as
// requiredDuringSchedulingIgnoredDuringExecution (spec.antiAffinity Required), each once.
func addAntiAffinity(pod *corev1.Pod, value string, required bool) {
	term := AntiAffinityTerm(value)
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.PodAntiAffinity == nil {
		pod.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	anti := pod.Spec.Affinity.PodAntiAffinity
	if !slices.ContainsFunc(anti.PreferredDuringSchedulingIgnoredDuringExecution, func(t corev1.WeightedPodAffinityTerm) bool {
		return equality.Semantic.DeepEqual(t, term)
	}) {
		anti.PreferredDuringSchedulingIgnoredDuringExecution = append(anti.PreferredDuringSchedulingIgnoredDuringExecution, term)
	}
	if required && !slices.ContainsFunc(anti.RequiredDuringSchedulingIgnoredDuringExecution, func(t corev1.PodAffinityTerm) bool {
		return equality.Semantic.DeepEqual(t, term.PodAffinityTerm)
	}) {
		anti.RequiredDuringSchedulingIgnoredDuringExecution = append(anti.RequiredDuringSchedulingIgnoredDuringExecution, term.PodAffinityTerm)
	}
}

// setGracePeriod writes spec.terminationGracePeriod into the pod, unless respectPodGracePeriod (default
// true) and the pod's own period is longer.
func setGracePeriod(pod *corev1.Pod, spec *singletonv1.StatefulSingletonSpec) {
	want := int64(spec.TerminationGracePeriod)
	if want <= 0 {
		want = defaultGracePeriod
	}
	respect := spec.RespectPodGracePeriod == nil || *spec.RespectPodGracePeriod
	if respect && pod.Spec.TerminationGracePeriodSeconds != nil && *pod.Spec.TerminationGracePeriodSeconds > want {
		return
	}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(want)
}

func addSchedulingGate(pod *corev1.Pod) {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == singletonv1.SchedulingGate {
			return
		}
	}
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: singletonv1.SchedulingGate})
}

// wrapperUnsupported returns why the pod cannot be held with the wrapper, or "": a conflict of the pod
// (wrapperConflict), or a container without command whose argv images does not give.
func wrapperUnsupported(pod *corev1.Pod, images map[string]ImageEntrypoint) string {
	if reason := wrapperConflict(pod); reason != "" {
		return reason
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == singletonv1.SidecarContainerName || len(c.Command) > 0 {
			continue
		}
		img, ok := images[c.Name]
		switch {
		case !ok:
			return fmt.Sprintf("container %q has no command in the pod spec and the webhook cannot read its image's entrypoint; held with the scheduling gate instead", c.Name)
		case img.Unknown != "":
			return fmt.Sprintf("container %q has no command in the pod spec and its image's entrypoint is not known: %s; held with the scheduling gate instead", c.Name, img.Unknown)
		case len(imageArgv(&c, img)) == 0:
			return fmt.Sprintf("container %q has no command in the pod spec and its image %q has neither ENTRYPOINT nor CMD; held with the scheduling gate instead", c.Name, c.Image)
		}
	}
	return ""
}

// wrapperConflict returns why the pod cannot be held with the wrapper whatever its images' configs
// say, or "".
func wrapperConflict(pod *corev1.Pod) string {
	if len(pod.Spec.InitContainers) > 0 && !isWrapped(pod) {
		return "the pod has init containers, which would run before the wrapper's hold; held with the scheduling gate instead"
	}
	if !isWrapped(pod) {
		// addVolume keeps a volume the pod already has under one of our names: the pod's own volume
		// would stand in for the signal or wrapper directory (one that already holds a start signal would
		// start the app without a grant).
		for _, v := range pod.Spec.Volumes {
			if isHoldVolume(v.Name) {
				return fmt.Sprintf("the pod already has a volume named %q, which the wrapper hold adds; held with the scheduling gate instead", v.Name)
			}
			// Only the status-sidecar may hold a token for the grant endpoint: with one of its own, an app
			// container could report its own exit while it still runs.
			if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool {
				return p.ServiceAccountToken != nil && p.ServiceAccountToken.Audience == singletonv1.GrantTokenAudience
			}) {
				return fmt.Sprintf("volume %q projects a ServiceAccount token for the audience %q, which only the status-sidecar may hold; held with the scheduling gate instead", v.Name, singletonv1.GrantTokenAudience)
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == singletonv1.SidecarContainerName {
			continue
		}
		for _, m := range c.VolumeMounts {
			at := path.Clean(m.MountPath)
			// wrapContainer makes a mount of our volume exactly ours, and would not mount it where the
			// wrapper looks for it.
			if want, ours := holdMounts[m.Name]; ours {
				if at != want {
					return fmt.Sprintf("container %q mounts volume %q at %s; held with the scheduling gate instead", c.Name, m.Name, m.MountPath)
				}
				continue
			}
			// Another volume at one of our directories would hide ours; one inside it would lay its own
			// files over ours (a start signal, the wrapper binary, a state file).
			for _, dir := range holdMounts {
				if at == dir || strings.HasPrefix(at, dir+"/") {
					return fmt.Sprintf("container %q already mounts %s; held with the scheduling gate instead", c.Name, m.MountPath)
				}
			}
		}
	}
	return ""
}

// holdMounts maps each volume the wrapper hold mounts in the app containers to where it is mounted.
var holdMounts = map[string]string{
	singletonv1.WrapperVolumeName: singletonv1.WrapperDir,
	singletonv1.SignalVolumeName:  singletonv1.SignalDir,
	singletonv1.ExitVolumeName:    singletonv1.ExitDir,
}

// isWrapped reports whether the wrapper hold was already added: the status-sidecar is there (or, for a
// pod admitted by an older webhook, the wrapper's init container).
func isWrapped(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		return c.Name == singletonv1.SidecarContainerName
	}) || slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool {
		return c.Name == singletonv1.WrapperInitContainerName
	})
}

// restricted is a container security context that meets the restricted Pod Security profile, so the
// injected containers are admitted wherever the app's own pod is.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// nonRootUser is the user of our images (distroless nonroot); set explicitly so runAsNonRoot can be
// verified also when the image config is not read.
const nonRootUser = 65532

func addWrapperHold(pod *corev1.Pod, cfg Config) {
	// A projected ServiceAccount token needs a named ServiceAccount. The API server's ServiceAccount
	// admission would name "default" anyway; naming it here keeps the pod valid wherever that plugin runs.
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = pod.Spec.DeprecatedServiceAccount
		if pod.Spec.ServiceAccountName == "" {
			pod.Spec.ServiceAccountName = "default"
		}
	}
	addVolume(pod, corev1.Volume{Name: singletonv1.SignalVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))}}})
	addVolume(pod, corev1.Volume{Name: singletonv1.WrapperVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}})
	addVolume(pod, corev1.Volume{Name: singletonv1.GrantTokenVolumeName, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience:          singletonv1.GrantTokenAudience,
				ExpirationSeconds: ptr.To(int64(3600)),
				Path:              "token",
			}}}}}})

	// The wrappers record their app's state here for the sidecar's exit report.
	addVolume(pod, corev1.Volume{Name: singletonv1.ExitVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))}}})

	var apps []string
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == singletonv1.SidecarContainerName {
			continue
		}
		wrapContainer(c, cfg.Images[c.Name])
		apps = append(apps, c.Name)
	}

	if !isWrapped(pod) {
		// `kubectl logs` and `kubectl exec` keep defaulting to the app, not to the sidecar put first.
		if _, ok := pod.Annotations[defaultContainerAnnotation]; !ok && len(pod.Spec.Containers) > 0 {
			pod.Annotations[defaultContainerAnnotation] = pod.Spec.Containers[0].Name
		}
		// First: the kubelet starts a pod's containers in order and waits for each postStart hook, so
		// the sidecar's hook has installed the wrapper before any app container starts.
		pod.Spec.Containers = append([]corev1.Container{sidecar(cfg, apps)}, pod.Spec.Containers...)
		return
	}
	// Mutated before (a re-run, a manifest copied from an admitted pod, or one admitted by an older
	// webhook): the sidecar there waits for exactly the app containers wrapped now.
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == singletonv1.SidecarContainerName {
			setEnv(c, corev1.EnvVar{Name: singletonv1.EnvAppContainers, Value: strings.Join(apps, ",")})
			// Unless that container already has something else there (then it is not our sidecar).
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == singletonv1.ExitVolumeName || path.Clean(m.MountPath) == singletonv1.ExitDir
			}) {
				c.VolumeMounts = append(c.VolumeMounts, exitMount())
			}
		}
	}
}

// defaultContainerAnnotation names the container kubectl logs/exec use when none is given.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

func withUser(sc *corev1.SecurityContext) *corev1.SecurityContext {
	sc.RunAsUser = ptr.To(int64(nonRootUser))
	sc.RunAsGroup = ptr.To(int64(nonRootUser))
	return sc
}

// sidecar is the status-sidecar container of a pod whose wrapped app containers are apps (spec order).
func sidecar(cfg Config, apps []string) corev1.Container {
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	env := []corev1.EnvVar{
		fieldEnv("POD_NAME", "metadata.name"),
		fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		fieldEnv("POD_UID", "metadata.uid"),
		{Name: "GRANT_URL", Value: cfg.GrantURL},
	}
	if cfg.GrantCA != "" {
		env = append(env, corev1.EnvVar{Name: "GRANT_CA", Value: cfg.GrantCA})
	}
	// Last: addWrapperHold rewrites it the same way on a pod that already has the sidecar.
	env = append(env, corev1.EnvVar{Name: singletonv1.EnvAppContainers, Value: strings.Join(apps, ",")})
	return corev1.Container{
		Name:    singletonv1.SidecarContainerName,
		Image:   cfg.SidecarImage,
		Command: []string{"/status-sidecar"},
		Env:     env,
		VolumeMounts: []corev1.VolumeMount{
			{Name: singletonv1.SignalVolumeName, MountPath: singletonv1.SignalDir},
			{Name: singletonv1.GrantTokenVolumeName, MountPath: singletonv1.GrantTokenDir, ReadOnly: true},
			{Name: singletonv1.WrapperVolumeName, MountPath: singletonv1.WrapperDir},
			exitMount(),
		},
		// Puts the wrapper (this very binary) where the app containers' new command points, before the
		// kubelet starts them. If it fails the kubelet restarts the sidecar; the app containers cannot
		// start without the wrapper (fail closed).
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{"/status-sidecar", "install-wrapper", singletonv1.WrapperBinary},
		}}},
		// Seed 000's footprint.
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext:          withUser(restricted()),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// wrapContainer replaces the container's command by the wrapper and records the original argv in
// ORIGINAL_ENTRYPOINT: command and args, or for a container without command the argv of its image
// config img (imageArgv). The kubelet expands $(VAR) in env values as it does in command and args; every $
// is doubled so the JSON reaches the wrapper verbatim, and the wrapper expands $(VAR) itself with the
// kubelet's rules, so the argv the app finally gets is the one it would have got unwrapped. The
// container also gets its own name (EnvContainerName) and the wrapper's mounts, exactly as below: a
// container already wrapped (a re-run, or a pod admitted by an older webhook) keeps its
// ORIGINAL_ENTRYPOINT and gets whatever of the rest it lacks.
func wrapContainer(c *corev1.Container, img ImageEntrypoint) {
	var entry corev1.EnvVar
	last := -1 // the kubelet takes the last variable of the same name
	for i, e := range c.Env {
		if e.Name == singletonv1.EnvOriginalEntrypoint {
			last = i
		}
	}
	if slices.Equal(c.Command, []string{singletonv1.WrapperBinary}) && last >= 0 {
		entry = c.Env[last]
	} else {
		argv := append(slices.Clone(c.Command), c.Args...)
		if len(c.Command) == 0 {
			argv = imageArgv(c, img)
		}
		raw, _ := json.Marshal(argv) // a []string always marshals
		entry = corev1.EnvVar{Name: singletonv1.EnvOriginalEntrypoint, Value: strings.ReplaceAll(string(raw), "$", "$$")}
		c.Command = []string{singletonv1.WrapperBinary}
		c.Args = nil
	}
	// Last, so that nothing the app defines is shadowed; a variable of the app under one of these names
	// is dropped (ours would win anyway: the kubelet takes the last of a name).
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == singletonv1.EnvOriginalEntrypoint || e.Name == singletonv1.EnvContainerName
	})
	c.Env = append(c.Env, corev1.EnvVar{Name: singletonv1.EnvContainerName, Value: c.Name}, entry)
	setMount(c, corev1.VolumeMount{Name: singletonv1.WrapperVolumeName, MountPath: singletonv1.WrapperDir, ReadOnly: true})
	// Read-only: only the sidecar may give the start signal, or fence the start off once the pod stops.
	setMount(c, corev1.VolumeMount{Name: singletonv1.SignalVolumeName, MountPath: singletonv1.SignalDir, ReadOnly: true})
	// Read-write: the wrapper writes its app's state and holds its lock there.
	setMount(c, exitMount())
}

// exitMount is the exit volume's mount, read-write, in the app containers and the sidecar.
func exitMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: singletonv1.ExitVolumeName, MountPath: singletonv1.ExitDir}
}

// setEnv puts e last in the container's env, in place of any variable of the same name.
func setEnv(c *corev1.Container, e corev1.EnvVar) {
	c.Env = append(slices.DeleteFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }), e)
}

// setMount makes the container's mount of m.Name exactly m: in place of the first, the others dropped
// (a second mount such as /var/run/signal/ beside /var/run/signal would undo a read-only one), or
// added. wrapperConflict has refused a mount of our volume elsewhere and another volume at or inside
// m.MountPath, so no path is mounted twice.
func setMount(c *corev1.Container, m corev1.VolumeMount) {
	i := slices.IndexFunc(c.VolumeMounts, func(x corev1.VolumeMount) bool { return x.Name == m.Name })
	if i < 0 {
		c.VolumeMounts = append(c.VolumeMounts, m)
		return
	}
	c.VolumeMounts[i] = m
	rest := slices.DeleteFunc(c.VolumeMounts[i+1:], func(x corev1.VolumeMount) bool { return x.Name == m.Name })
	c.VolumeMounts = c.VolumeMounts[:i+1+len(rest)]
}

// isHoldVolume reports whether name is one of the volumes the wrapper hold adds.
func isHoldVolume(name string) bool {
	return name == singletonv1.SignalVolumeName || name == singletonv1.WrapperVolumeName || name == singletonv1.GrantTokenVolumeName ||
		name == singletonv1.ExitVolumeName
}

func addVolume(pod *corev1.Pod, v corev1.Volume) {
	if !slices.ContainsFunc(pod.Spec.Volumes, func(x corev1.Volume) bool { return x.Name == v.Name }) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v)
	}
}

// OriginalArgv decodes an ORIGINAL_ENTRYPOINT value as the wrapper receives it (after the kubelet turned
// every $$ back into $).
func OriginalArgv(value string) ([]string, error) {
	var argv []string
	if err := json.Unmarshal([]byte(value), &argv); err != nil {
		return nil, fmt.Errorf("%s is not a JSON array of strings: %w", singletonv1.EnvOriginalEntrypoint, err)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s is empty", singletonv1.EnvOriginalEntrypoint)
	}
	return argv, nil
}
