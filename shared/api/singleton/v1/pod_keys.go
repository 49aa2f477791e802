package v1

// Keys the admission webhook writes on the pods of a StatefulSingleton and the operator reads back. They
// keep the original StatefulSingleton operator's apps.statefulsingleton.com spelling (not the API group),
// so pods look as that operator's documentation describes.
const (
	// ReadinessGate is the pod readiness gate the operator sets to True once the pod is the released,
	// active instance: until then the pod receives no Service traffic.
	ReadinessGate = "apps.statefulsingleton.com/singleton-ready"

	// LabelManaged (value "true") marks every pod admitted with a hold (the original operator's label).
	LabelManaged = "apps.statefulsingleton.com/managed"
	// LabelSingleton holds SingletonLabelValue(name) of the StatefulSingleton that admitted the pod; the
	// anti-affinity term selects on it so that only pods of the same singleton repel each other.
	LabelSingleton = "apps.statefulsingleton.com/singleton"
	// LabelNamespaceEnabled (value "true") is the namespace label that scopes the pod webhook: only pods
	// of namespaces carrying it are sent to admission. The singleton operator keeps it on every namespace
	// that holds a StatefulSingleton.
	LabelNamespaceEnabled = "apps.statefulsingleton.com/enabled"

	// AnnotationManaged (value "true") is the original operator's annotation on every managed pod.
	AnnotationManaged = "apps.statefulsingleton.com/statefulsingleton-managed"
	// AnnotationHoldMode records the hold the pod was admitted with ("Wrapper" or "SchedulingGate"),
	// which tells the operator how to release it.
	AnnotationHoldMode = "apps.statefulsingleton.com/hold-mode"
	// AnnotationHoldFallback explains why a pod of a Wrapper singleton was admitted with the
	// SchedulingGate hold instead (e.g. a container without a command, whose image entrypoint the
	// webhook cannot read).
	AnnotationHoldFallback = "apps.statefulsingleton.com/hold-fallback-reason"
	// AnnotationStartGranted is written by the operator when it releases a Wrapper pod (value: the fencing
	// epoch). The grant server answers the pod's status-sidecar once it is present.
	AnnotationStartGranted = "apps.statefulsingleton.com/start-granted"
	// AnnotationEpoch is the fencing epoch stamped on a released pod (see status.epoch).
	AnnotationEpoch = "apps.statefulsingleton.com/epoch"
	// AnnotationStartOnExit is a conditional release of a held Wrapper pod (StartOnExit): the operator
	// writes it while the pod's predecessor is being deleted, and the grant server answers the pod's
	// status-sidecar the moment it accepts that predecessor's exit report, before any API write. Once
	// the predecessor's exit is recorded (or the pod is gone from a node that confirmed it), the operator
	// completes the release with the epoch and start-granted annotations.
	AnnotationStartOnExit = "apps.statefulsingleton.com/start-on-exit-of"

	// SchedulingGate is the pod scheduling gate of the SchedulingGate hold; the operator removes it on release.
	SchedulingGate = "apps.statefulsingleton.com/handover"

	// SidecarContainerName is the container that waits for the start grant (the original operator's name).
	SidecarContainerName = "status-sidecar"
	// WrapperInitContainerName is the init container that copied the singleton-wrapper binary into pods
	// admitted by earlier webhooks; the status-sidecar's postStart hook does it now. Still recognised as a
	// wrapped pod.
	WrapperInitContainerName = "singleton-wrapper-install"
	// SignalVolumeName is the emptyDir shared by the sidecar (read-write) and the app containers (read-only).
	SignalVolumeName = "statefulsingleton-signal"
	// WrapperVolumeName is the emptyDir holding the singleton-wrapper binary.
	WrapperVolumeName = "statefulsingleton-wrapper"
	// GrantTokenVolumeName is the projected, pod-bound ServiceAccount token the sidecar presents.
	GrantTokenVolumeName = "statefulsingleton-grant-token"

	// SignalDir is where the start signal lives (the original operator's path).
	SignalDir = "/var/run/signal"
	// StartSignalFile is the file whose existence releases the wrapped entrypoints (the original operator's path).
	StartSignalFile = SignalDir + "/start-signal"
	// WrapperDir is where the wrapper binary is mounted in app containers (the original operator's path).
	WrapperDir = "/opt/wrapper"
	// WrapperBinary is the wrapped containers' new command.
	WrapperBinary = WrapperDir + "/singleton-wrapper"
	// GrantTokenDir is where the sidecar's grant token is mounted.
	GrantTokenDir = "/var/run/secrets/statefulsingleton"
	// GrantTokenAudience is the audience of the sidecar's token; the grant server accepts no other.
	GrantTokenAudience = "statefulsingleton"

	// EnvOriginalEntrypoint holds a wrapped container's original command and args as a JSON array of
	// strings, the exact argv the wrapper executes (the original operator's variable name).
	EnvOriginalEntrypoint = "ORIGINAL_ENTRYPOINT"

	// Exit report (docs/singleton.md, "Handover on the process's exit"): a terminating pod's
	// status-sidecar tells the operator that every wrapped app process has exited, so the next pod is
	// released without waiting for the kubelet to confirm the stop.

	// AnnotationExited is written by the operator on a terminating Wrapper pod whose status-sidecar
	// reported the exit of every app container (value: the app containers' names, comma-separated). A
	// pod with a deletionTimestamp whose annotation names every container but the status-sidecar no
	// longer blocks a release.
	AnnotationExited = "apps.statefulsingleton.com/exited"
	// ExitVolumeName is the emptyDir where the wrappers record their app's state (read-write in the app
	// containers and the sidecar).
	ExitVolumeName = "statefulsingleton-exit"
	// ExitDir is where ExitVolumeName is mounted. Per app container <name>: the file <name> holds
	// "running" or "exited"; <name>.lock is flocked by the living wrapper for its whole life.
	ExitDir = "/var/run/statefulsingleton-exit"
	// StoppingFile is the fence the sidecar writes (under a flock of ExitDir) once the pod is stopping:
	// a wrapper that finds it never starts its app, so no app can start after the sidecar looked.
	StoppingFile = SignalDir + "/stopping"
	// StopSignalFile is the file the sidecar writes once a stopping pod's apps may get their stop signal
	// (the replacement runs, or none is coming: spec.successorWait); a supervising wrapper holds the
	// kubelet's SIGTERM back until then.
	StopSignalFile = SignalDir + "/stop-signal"
	// EnvContainerName names its own container to the wrapper (its ExitDir files).
	EnvContainerName = "STATEFULSINGLETON_CONTAINER"
	// EnvAppContainers lists the wrapped app containers (comma-separated) to the sidecar: the ones
	// whose exit it waits for and reports.
	EnvAppContainers = "STATEFULSINGLETON_APP_CONTAINERS"
)
