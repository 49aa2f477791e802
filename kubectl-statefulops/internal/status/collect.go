package status

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/kube"
)

// scope is what one status invocation shows.
type scope struct {
	// namespace is "" with --all-namespaces.
	namespace string
	// kinds are the kinds to show that the cluster serves.
	kinds []kind
	// name is the one object's name with KIND/NAME.
	name string
}

// snapshot is one read of everything in scope: the summary, and the resourceVersion of each list so a
// watch starts exactly after it.
type snapshot struct {
	summary Summary
	// versions maps each watched list (a kind's name, or "Pod") to its resourceVersion.
	versions map[string]string
	// namespaces are those holding objects: only their pods' changes make a new frame.
	namespaces map[string]bool
}

// resolveScope turns the arguments into the kinds to list, skipping the kinds whose CRD is not
// installed, unless the user named that kind.
func resolveScope(c client.Client, namespace string, kindArg, name string) (scope, error) {
	sc := scope{namespace: namespace, name: name}
	candidates := kinds
	if kindArg != "" {
		k, err := lookupKind(kindArg)
		if err != nil {
			return sc, err
		}
		candidates = []kind{k}
	}
	for _, k := range candidates {
		ok, err := kube.Installed(c, k.newObject())
		if err != nil {
			return sc, fmt.Errorf("asking the cluster whether it serves %s: %w", k.Kind, err)
		}
		if !ok {
			if kindArg != "" {
				return sc, notInstalledError(k)
			}
			continue
		}
		sc.kinds = append(sc.kinds, k)
	}
	return sc, nil
}

func (sc scope) listOptions() []client.ListOption {
	var opts []client.ListOption
	if sc.namespace != "" {
		opts = append(opts, client.InNamespace(sc.namespace))
	}
	return opts
}

// kindListOptions select the statefulops objects in scope: one by name with KIND/NAME.
func (sc scope) kindListOptions() []client.ListOption {
	opts := sc.listOptions()
	if sc.name != "" {
		opts = append(opts, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", sc.name)})
	}
	return opts
}

// collect reads the objects in scope, then the pods (and, for rollouts and ExtendedStatefulSets, the
// StatefulSets) of their namespaces, and summarises each object.
func collect(ctx context.Context, c client.Client, sc scope) (snapshot, error) {
	snap := snapshot{versions: map[string]string{}, summary: Summary{Objects: []Object{}}}
	type found struct {
		k   kind
		obj client.Object
	}
	var objs []found
	wantSets := false
	for _, k := range sc.kinds {
		list := k.newList()
		if err := c.List(ctx, list, sc.kindListOptions()...); err != nil {
			return snap, fmt.Errorf("listing %s: %w", k.Plural, err)
		}
		snap.versions[k.Kind] = list.GetResourceVersion()
		items, err := meta.ExtractList(list)
		if err != nil {
			return snap, err
		}
		for _, it := range items {
			obj := it.(client.Object)
			objs = append(objs, found{k, obj})
			if k.Kind == "PhasedRollout" || k.Kind == "ExtendedStatefulSet" {
				wantSets = true
			}
		}
	}
	byNS := map[string]*namespaceState{}
	nsOf := func(ns string) *namespaceState {
		if byNS[ns] == nil {
			byNS[ns] = &namespaceState{}
		}
		return byNS[ns]
	}
	snap.namespaces = map[string]bool{}
	for _, o := range objs {
		snap.namespaces[o.obj.GetNamespace()] = true
	}
	// The pods are read only in the namespaces that hold objects. The pod watch needs a
	// resourceVersion to start from even when there are none: in one namespace the list gives it;
	// across namespaces a list of at most one pod does, without reading every pod of the cluster.
	if sc.namespace == "" {
		var probe corev1.PodList
		if err := c.List(ctx, &probe, client.Limit(1)); err != nil {
			return snap, fmt.Errorf("listing pods: %w", err)
		}
		snap.versions["Pod"] = probe.ResourceVersion
	}
	for _, ns := range slices.Sorted(maps.Keys(snap.namespaces)) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return snap, fmt.Errorf("listing the pods of namespace %s: %w", ns, err)
		}
		nsOf(ns).Pods = pods.Items
		if sc.namespace != "" {
			snap.versions["Pod"] = pods.ResourceVersion
		}
	}
	if sc.namespace != "" && len(snap.namespaces) == 0 {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(sc.namespace), client.Limit(1)); err != nil {
			return snap, fmt.Errorf("listing pods: %w", err)
		}
		snap.versions["Pod"] = pods.ResourceVersion
	}
	if wantSets {
		listed := map[string]bool{}
		for _, o := range objs {
			if (o.k.Kind != "PhasedRollout" && o.k.Kind != "ExtendedStatefulSet") || listed[o.obj.GetNamespace()] {
				continue
			}
			listed[o.obj.GetNamespace()] = true
			var sets appsv1.StatefulSetList
			if err := c.List(ctx, &sets, client.InNamespace(o.obj.GetNamespace())); err != nil {
				return snap, fmt.Errorf("listing the StatefulSets of namespace %s: %w", o.obj.GetNamespace(), err)
			}
			nsOf(o.obj.GetNamespace()).StatefulSets = sets.Items
		}
	}
	for _, o := range objs {
		sum, err := summarize(o.k, o.obj, byNS[o.obj.GetNamespace()])
		if err != nil {
			return snap, err
		}
		snap.summary.Objects = append(snap.summary.Objects, sum)
	}
	sortObjects(snap.summary.Objects)
	return snap, nil
}

// sortObjects puts the objects in the view's stable order: by kind (the order of kinds), namespace, name.
func sortObjects(objs []Object) {
	rank := map[string]int{}
	for i, k := range kinds {
		rank[k.Kind] = i
	}
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if rank[a.Kind] != rank[b.Kind] {
			return rank[a.Kind] < rank[b.Kind]
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}
