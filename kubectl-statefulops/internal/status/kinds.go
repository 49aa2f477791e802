package status

import (
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// kind is one of the five statefulops kinds, with the names a user may call it by and the operator
// that serves it (each operator installs only its own CRD).
type kind struct {
	Kind       string
	APIVersion string
	Plural     string
	Short      string
	Operator   string
	newList    func() client.ObjectList
	newObject  func() client.Object
}

// kinds are in the order status prints them: the pod-level guards first, then the workloads.
var kinds = []kind{
	{"StatefulSingleton", singletonv1.GroupVersion.String(), "statefulsingletons", "sss", "singleton-operator",
		func() client.ObjectList { return &singletonv1.StatefulSingletonList{} },
		func() client.Object { return &singletonv1.StatefulSingleton{} }},
	{"StatefulSetLock", leasev1.GroupVersion.String(), "statefulsetlocks", "ssl", "lease-operator",
		func() client.ObjectList { return &leasev1.StatefulSetLockList{} },
		func() client.Object { return &leasev1.StatefulSetLock{} }},
	{"PhasedRollout", rolloutv1alpha1.GroupVersion.String(), "phasedrollouts", "pr", "rollout-operator",
		func() client.ObjectList { return &rolloutv1alpha1.PhasedRolloutList{} },
		func() client.Object { return &rolloutv1alpha1.PhasedRollout{} }},
	{"StatefulCluster", clusterv1alpha1.GroupVersion.String(), "statefulclusters", "stc", "cluster-operator",
		func() client.ObjectList { return &clusterv1alpha1.StatefulClusterList{} },
		func() client.Object { return &clusterv1alpha1.StatefulCluster{} }},
	{"ExtendedStatefulSet", extendedv1alpha1.GroupVersion.String(), "extendedstatefulsets", "ests", "extended-operator",
		func() client.ObjectList { return &extendedv1alpha1.ExtendedStatefulSetList{} },
		func() client.Object { return &extendedv1alpha1.ExtendedStatefulSet{} }},
}

// group is the kind's API group, accepted after a dot (statefulsingleton.apps.openshift.statefulsingleton.com).
func (k kind) group() string {
	g, _, _ := strings.Cut(k.APIVersion, "/")
	return g
}

// lookupKind finds a kind by its name, plural or short name, case-insensitively, optionally followed
// by .<group> as kubectl accepts.
func lookupKind(name string) (kind, error) {
	n := strings.ToLower(name)
	for _, k := range kinds {
		for _, alias := range []string{strings.ToLower(k.Kind), k.Plural, k.Short} {
			if n == alias || n == alias+"."+k.group() {
				return k, nil
			}
		}
	}
	var known []string
	for _, k := range kinds {
		known = append(known, fmt.Sprintf("%s (%s)", k.Kind, k.Short))
	}
	return kind{}, fmt.Errorf("%q is not a statefulops kind; the kinds are %s", name, strings.Join(known, ", "))
}

// notInstalledError is the error for a kind the user named whose CRD the cluster does not serve.
func notInstalledError(k kind) error {
	return fmt.Errorf("%s (%s) is not installed in this cluster: install the %s (kubectl apply -f deploy/%s.yaml from a statefulops release)",
		k.Kind, k.APIVersion, k.Operator, k.Operator)
}
