package status

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
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

// --watch draws a new frame when an object or a pod of its namespace changes, from a watch event.
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
		done <- watchLoop(ctx, c, sc, snap, 10*time.Millisecond, func(s Summary) error {
			select {
			case frames <- s:
			case <-ctx.Done():
			}
			return nil
		})
	}()

	change, shows := newWriter(t, ctx, c, lock)
	changeUntilFrame(t, change, shows, frames, done)

	// A pod of the lock's namespace changes: its role label is removed.
	changeUntilFrame(t, func(int32) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "pg-2"}, &p); err != nil {
			t.Fatal(err)
		}
		delete(p.Labels, leasev1.RoleLabel)
		if err := c.Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}, func(s Summary) bool { return slices.Contains(s.Objects[0].Lock.Unlabelled, "pg-2") }, frames, done)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("cancelling the watch is not an error: %v", err)
	}
}

// Frames: piped, each later frame follows a separator; on a terminal each clears the screen; a frame
// equal to the last is not written; JSON is a stream of documents and YAML documents are separated.
func TestFrames(t *testing.T) {
	one := summaryOf(t, fixtures()[2])
	two := summaryOf(t, fixtures()[3])
	for _, tc := range []struct {
		name    string
		f       frames
		want    []string // substrings in order
		frames  int
		noClear bool
	}{
		{name: "piped", f: frames{format: "", style: Style{}, watch: true}, want: []string{"StatefulSetLock", "\n--- ", "StatefulSetLock"}, frames: 2, noClear: true},
		{name: "terminal", f: frames{format: "", style: Style{Tree: true}, watch: true}, want: []string{"\x1b[H\x1b[2J", "StatefulSetLock", "\x1b[H\x1b[2J", "StatefulSetLock"}, frames: 2},
		{name: "json", f: frames{format: "json", watch: true}, want: []string{`"objects"`, "}\n{", `"objects"`}, frames: 2, noClear: true},
		{name: "yaml", f: frames{format: "yaml", watch: true}, want: []string{"objects:", "\n---\nobjects:"}, frames: 2, noClear: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			tc.f.w = &b
			for _, s := range []Summary{one, one, two, two} {
				if err := tc.f.emit(s); err != nil {
					t.Fatal(err)
				}
			}
			if tc.f.count != tc.frames {
				t.Errorf("%d frames written, want %d (equal frames are skipped)", tc.f.count, tc.frames)
			}
			rest := b.String()
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%s", w, b.String())
				}
				rest = rest[i+len(w):]
			}
			if tc.noClear && strings.Contains(b.String(), "\x1b") {
				t.Errorf("escape sequences in %s output", tc.name)
			}
		})
	}
	// Without --watch a terminal's single frame does not clear the screen.
	var b strings.Builder
	f := frames{w: &b, style: Style{Tree: true}}
	if err := f.emit(one); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "\x1b[2J") {
		t.Error("status without --watch cleared the screen")
	}
}

// expiringClient's first watch reports 410 Gone at once, as the API server does for a resourceVersion
// older than its watch cache.
type expiringClient struct {
	client.WithWatch
	watches int
}

func (c *expiringClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	c.watches++
	if c.watches == 1 {
		w := watch.NewFake()
		go w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		return w, nil
	}
	return c.WithWatch.Watch(ctx, list, opts...)
}

// A watch that expires makes the loop read everything again and watch on from there.
func TestWatchRelistsAfterExpiry(t *testing.T) {
	fx := fixtures()[2]
	lock := fx.obj.(*leasev1.StatefulSetLock)
	c := &expiringClient{WithWatch: fake.NewClientBuilder().WithScheme(kube.Scheme).WithRESTMapper(mapperServing("ssl")).
		WithObjects(lock).WithStatusSubresource(lock).Build()}
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
	frames := make(chan Summary, 16)
	done := make(chan error, 1)
	go func() {
		done <- watchLoop(ctx, c, sc, snap, 10*time.Millisecond, func(s Summary) error {
			select {
			case frames <- s:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	select {
	case s := <-frames:
		if len(s.Objects) != 1 || s.Objects[0].Lock.Writer != "pg-0" {
			t.Errorf("the frame read after the expiry: %+v", s.Objects)
		}
	case err := <-done:
		t.Fatalf("the loop ended on an expired watch: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no read after the watch expired")
	}
	// Watching resumed: a change after the expiry is drawn.
	change, shows := newWriter(t, ctx, c, lock)
	changeUntilFrame(t, change, shows, frames, done)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("cancelling: %v", err)
	}
}

// changeUntilFrame makes a change until the watch loop draws a frame that shows it. The fake client's
// watch does not replay from a resourceVersion, so the change is repeated (with i counting up from 2)
// until the watch, opened concurrently, has seen one.
func changeUntilFrame(t *testing.T, change func(i int32), shows func(Summary) bool, frames <-chan Summary, done <-chan error) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(30 * time.Second)
	for i := int32(2); ; i++ {
		change(i)
		for {
			select {
			case s := <-frames:
				if shows(s) {
					return
				}
				continue // a frame from before the change
			case err := <-done:
				t.Fatalf("the watch ended: %v", err)
			case <-timeout:
				t.Fatal("no frame after the change")
			case <-tick.C:
			}
			break
		}
	}
}

// newWriter makes pg-1 the lock's writer, with epoch i.
func newWriter(t *testing.T, ctx context.Context, c client.Client, lock *leasev1.StatefulSetLock) (func(int32), func(Summary) bool) {
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
	shows := func(s Summary) bool { l := s.Objects[0].Lock; return l.Writer == "pg-1" && l.Epoch >= 2 }
	return change, shows
}
