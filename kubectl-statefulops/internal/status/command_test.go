package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/kube"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		kind, name string
		err        string
	}{
		{args: nil},
		{args: []string{"sss"}, kind: "sss"},
		{args: []string{"sss/db"}, kind: "sss", name: "db"},
		{args: []string{"StatefulSingleton", "db"}, kind: "StatefulSingleton", name: "db"},
		{args: []string{"sss/"}, err: "expected KIND/NAME"},
		{args: []string{"sss/db", "x"}, err: "not both"},
	} {
		kind, name, err := parseArgs(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || kind != tc.kind || name != tc.name {
			t.Errorf("%v: got %q %q %v, want %q %q", tc.args, kind, name, err, tc.kind, tc.name)
		}
	}
}

func TestLookupKind(t *testing.T) {
	for in, want := range map[string]string{
		"sss": "StatefulSingleton", "StatefulSingleton": "StatefulSingleton", "statefulsingletons": "StatefulSingleton",
		"STC": "StatefulCluster", "statefulcluster.enge.me": "StatefulCluster", "ssl": "StatefulSetLock",
		"PR": "PhasedRollout", "phasedrollouts": "PhasedRollout", "ests": "ExtendedStatefulSet", "ExtendedStatefulSets": "ExtendedStatefulSet",
	} {
		k, err := lookupKind(in)
		if err != nil || k.Kind != want {
			t.Errorf("lookupKind(%q) = %q, %v; want %s", in, k.Kind, err, want)
		}
	}
	if _, err := lookupKind("pods"); err == nil || !strings.Contains(err.Error(), "StatefulSingleton (sss)") {
		t.Errorf("an unknown kind's error lists the kinds: %v", err)
	}
}

// mapperServing is a RESTMapper that serves only the given kinds, as a cluster where only some
// operators are installed.
func mapperServing(kindNames ...string) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, meta.RESTScopeNamespace)
	for _, n := range kindNames {
		k, _ := lookupKind(n)
		gv, _ := schema.ParseGroupVersion(k.APIVersion)
		m.Add(gv.WithKind(k.Kind), meta.RESTScopeNamespace)
	}
	return m
}

// Kinds whose CRD is missing are skipped; naming one is an error that names its operator.
func TestResolveScopeSkipsKindsNotInstalled(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithRESTMapper(mapperServing("ssl", "pr")).Build()
	sc, err := resolveScope(c, "shop", "", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range sc.kinds {
		got = append(got, k.Kind)
	}
	if strings.Join(got, ",") != "StatefulSetLock,PhasedRollout" {
		t.Errorf("kinds in scope: %v", got)
	}
	_, err = resolveScope(c, "shop", "stc", "")
	if err == nil || !strings.Contains(err.Error(), "install the cluster-operator") {
		t.Errorf("a named kind that is not installed: %v", err)
	}
}

// --watch draws a new frame when an object changes, from a watch event.
func TestWatchRedrawsOnChange(t *testing.T) {
	fx := fixtures()[2] // lock-healthy
	lock := fx.obj.(*leasev1.StatefulSetLock)
	lock.ResourceVersion = ""
	objs := []client.Object{lock}
	for i := range fx.ns.Pods {
		p := fx.ns.Pods[i]
		objs = append(objs, &p)
	}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithRESTMapper(mapperServing("ssl")).
		WithObjects(objs...).WithStatusSubresource(lock).Build()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sc, err := resolveScope(c, "shop", "", "")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := collect(ctx, c, sc)
	if err != nil {
		t.Fatal(err)
	}
	if w := snap.summary.Objects[0].Lock.Writer; w != "pg-0" {
		t.Fatalf("first read: writer %q", w)
	}
	frames := make(chan Summary, 16)
	done := make(chan error, 1)
	go func() {
		done <- watchLoop(ctx, c, sc, snap, 10*time.Millisecond, func(s Summary) error { frames <- s; return nil })
	}()

	// The fake client's watch does not replay from a resourceVersion, so the change is repeated until
	// the watch, opened concurrently, has seen one.
	change := func(epoch int32) {
		var cur leasev1.StatefulSetLock
		if err := c.Get(ctx, client.ObjectKeyFromObject(lock), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Status.WriterPod = "pg-1"
		cur.Status.LeaseTransitions = epoch
		if err := c.Status().Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(30 * time.Second)
	for epoch := int32(2); ; epoch++ {
		change(epoch)
		select {
		case s := <-frames:
			if l := s.Objects[0].Lock; l.Writer != "pg-1" || l.Epoch < 2 {
				t.Errorf("the frame after the change shows writer %q epoch %d", l.Writer, l.Epoch)
			}
		case err := <-done:
			t.Fatalf("the watch ended: %v", err)
		case <-timeout:
			t.Fatal("no frame after the change")
		case <-tick.C:
			continue
		}
		break
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("cancelling the watch is not an error: %v", err)
	}
}
