package v1

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StartOnExit is a conditional release (AnnotationStartOnExit): the held pod that carries it may start
// the moment every app process of the pod PodUID has exited, as that pod's status-sidecar reports it.
// Epoch is the fencing epoch reserved for the release; Node is where PodUID ran, whose readiness decides
// whether its disappearance alone may count as its stop (a node that is not Ready never confirmed it).
// +kubebuilder:object:generate=false
type StartOnExit struct {
	Epoch  int64
	PodUID types.UID
	Node   string
}

// String is the annotation's value: "<epoch>/<pod UID>/<node>".
func (c StartOnExit) String() string {
	return strconv.FormatInt(c.Epoch, 10) + "/" + string(c.PodUID) + "/" + c.Node
}

// ParseStartOnExit reads the value of AnnotationStartOnExit.
func ParseStartOnExit(value string) (StartOnExit, error) {
	parts := strings.Split(value, "/")
	if len(parts) != 3 || parts[1] == "" {
		return StartOnExit{}, fmt.Errorf("%s %q is not <epoch>/<pod UID>/<node>", AnnotationStartOnExit, value)
	}
	epoch, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || epoch <= 0 {
		return StartOnExit{}, fmt.Errorf("%s %q: the epoch is not a positive integer", AnnotationStartOnExit, value)
	}
	return StartOnExit{Epoch: epoch, PodUID: types.UID(parts[1]), Node: parts[2]}, nil
}

// PodStartOnExit is the pod's conditional release, if it carries one that parses.
func PodStartOnExit(pod *corev1.Pod) (StartOnExit, bool) {
	value, ok := pod.Annotations[AnnotationStartOnExit]
	if !ok {
		return StartOnExit{}, false
	}
	c, err := ParseStartOnExit(value)
	return c, err == nil
}

// ExitRecorded reports whether the pod is being deleted and the operator recorded its status-sidecar's
// report that the process of every app container exited (AnnotationExited names every container but the
// status-sidecar). The deletionTimestamp is checked too, so an annotation on a pod that is not being
// deleted never counts.
func ExitRecorded(pod *corev1.Pod) bool {
	value, ok := pod.Annotations[AnnotationExited]
	if !ok || pod.DeletionTimestamp.IsZero() {
		return false
	}
	exited := strings.Split(value, ",")
	for _, c := range pod.Spec.Containers {
		if c.Name != SidecarContainerName && !slices.Contains(exited, c.Name) {
			return false
		}
	}
	return true
}
