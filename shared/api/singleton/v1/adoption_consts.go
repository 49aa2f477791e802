package v1

// Adoption: a pod of the singleton that runs without a start hold (created before the operator labelled
// its namespace for the pod webhook, e.g. a Deployment applied in the same file as its
// StatefulSingleton, or running before the StatefulSingleton was created) becomes the active pod when it
// is the only pod of the singleton that is not terminal. From then on it is handled exactly like a pod
// the operator released: it blocks every release, and the next rollout or deletion hands over from it.
const (
	// AnnotationAdopted (value "true") marks a pod the operator adopted as the active pod: it was
	// running without a start hold, so its start was not held by the operator. It carries the epoch
	// annotation like a released pod.
	AnnotationAdopted = "apps.statefulsingleton.com/adopted"

	// ReasonAdopted: a running pod without a start hold was adopted as the active pod (Event).
	ReasonAdopted = "Adopted"
	// ReasonWaitingToAdopt: the only pod of the singleton carries no start hold and does not run yet; it
	// is adopted once it runs (Ready=False reason, UngatedPod reason, Event).
	ReasonWaitingToAdopt = "WaitingToAdopt"
	// ReasonSeveralPodsWithoutHold: two or more pods without a start hold run; none is adopted until
	// only one is left (Ready=False reason, UngatedPod reason, Event).
	ReasonSeveralPodsWithoutHold = "SeveralPodsWithoutHold"
	// ReasonPodWithoutHold: a pod without a start hold exists beside other pods of the singleton; it is
	// not adopted, and it is deleted while another pod is active (UngatedPod reason).
	ReasonPodWithoutHold = "PodWithoutHold"
)
