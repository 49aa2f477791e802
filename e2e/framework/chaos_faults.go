//go:build e2e

package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/statefulops/statefulops/e2e/operators"
)

// chaosOperator is one operator of deploy/<name>.yaml run as a local process by a chaos campaign,
// like LocalOperator, but restartable from the fault goroutines (errors, not test failures) and
// optionally talking to the API server through an apiFaultProxy.
type chaosOperator struct {
	name, stateDir, kubeconfig string
	// binDir holds the binary the process runs: empty for this release's ($STATEFULOPS_BIN), the next
	// release's after an odd number of operator-upgrade faults (UpgradeAndRestart).
	binDir string
	mu     sync.Mutex
}

// StartChaosOperator installs the operator's manifest (once), parks its in-cluster Deployment and
// starts the operator locally; through proxy when it is not nil.
func StartChaosOperator(t *testing.T, name string, proxy *apiFaultProxy) *chaosOperator {
	t.Helper()
	require.NoError(t, InstallManifestOnce(name), "kubectl apply -f deploy/%s.yaml", name)
	scaleInClusterOperator(t, name, 0)
	t.Cleanup(func() { scaleInClusterOperator(t, name, 1) })
	op := &chaosOperator{name: name, kubeconfig: Kubeconfig,
		stateDir: filepath.Join(filepath.Dir(Kubeconfig), "chaos-"+strings.TrimSuffix(name, "-operator"))}
	if proxy != nil {
		op.kubeconfig = proxy.kubeconfig(t)
	}
	registerAfterAPIRestart(t, op.ensure)
	t.Cleanup(func() {
		assert.NoError(t, operators.Stop(context.Background(), op.stateDir, 15*time.Second, name))
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	require.NoError(t, op.start(ctx))
	t.Logf("%s started (log %s)", name, operators.LogPath(op.stateDir, name))
	return op
}

// start starts the process unless it runs, and waits until it is ready, retrying while the API server
// is away (a restart of it, or the process losing its leader election meanwhile, fails an attempt).
func (o *chaosOperator) start(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	acquired := o.leaderships()
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		probe, err1 := freeLoopbackPort()
		metrics, err2 := freeLoopbackPort()
		if err := errors.Join(err1, err2); err != nil {
			return false, err
		}
		b := operators.Binary{Name: o.name, ServiceAccount: o.name + "-system/" + o.name + "-controller-manager", ProbePort: probe, MetricsPort: metrics}
		if _, last = operators.Start(ctx, operators.Options{StateDir: o.stateDir, Kubeconfig: o.kubeconfig, BinDir: o.binDir}, []operators.Binary{b}); last != nil {
			_ = operators.Stop(context.WithoutCancel(ctx), o.stateDir, time.Second, o.name)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("starting %s: %w (last: %v)", o.name, err, last)
	}
	// Ready is not leading: after a SIGKILL the new process waits out the old one's Lease. Wait until
	// it leads, so that the next fault hits a working operator rather than one still waiting.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		return o.leaderships() > acquired, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not win its leader election: %w (log %s)", o.name, err, operators.LogPath(o.stateDir, o.name))
	}
	return nil
}

// leaderships counts the leader elections the operator's log says it won.
func (o *chaosOperator) leaderships() int {
	raw, _ := os.ReadFile(operators.LogPath(o.stateDir, o.name))
	return bytes.Count(raw, []byte("Successfully acquired lease"))
}

// loggedVersion reports whether the process's latest start, the last "Starting manager" line of its
// log (appended to at every start), names version.
func (o *chaosOperator) loggedVersion(version string) bool {
	raw, _ := os.ReadFile(operators.LogPath(o.stateDir, o.name))
	i := bytes.LastIndex(raw, []byte(`"Starting manager"`))
	if i < 0 {
		return false
	}
	line, _, _ := bytes.Cut(raw[i:], []byte("\n"))
	return bytes.Contains(line, []byte(`"version":"`+version+`"`))
}

// ensure starts the process again if it exited (an operator exits when it loses its leader
// election, e.g. while the API server restarts).
func (o *chaosOperator) ensure(ctx context.Context) error {
	if pidFileAlive(o.stateDir, o.name) {
		return nil
	}
	return o.start(ctx)
}

// pidFileAlive reports whether the process of a binary operators.Start started from stateDir runs.
func pidFileAlive(stateDir, name string) bool {
	raw, err := os.ReadFile(filepath.Join(operators.Dir(stateDir), name+".pid"))
	if err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(raw)) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] != 'Z'
}

// kill SIGKILLs the process: no cleanup, no release of its leader-election Lease.
func (o *chaosOperator) kill(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return killByPIDFile(ctx, o.stateDir, o.name)
}

// killByPIDFile SIGKILLs a binary that operators.Start started from stateDir and reaps its files.
func killByPIDFile(ctx context.Context, stateDir, name string) error {
	raw, err := os.ReadFile(filepath.Join(operators.Dir(stateDir), name+".pid"))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return operators.Stop(ctx, stateDir, time.Second, name)
}

// freeLoopbackPort returns a loopback port that was free a moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// apiFaultProxy is a loopback HTTP proxy in front of the API server for one operator: it forwards
// each request with the admin credentials (the operator's impersonation headers pass through, so it
// keeps exactly its manifest's RBAC), and fails a fraction of them first, chosen at random: 500, 429
// with Retry-After, or a connection reset. Watches stream through unbuffered.
type apiFaultProxy struct {
	addr     string
	mu       sync.Mutex
	rng      *rand.Rand
	rate     float64
	injected atomic.Int64
	byKind   sync.Map // kind -> *atomic.Int64
	writes   apiWrites
}

// apiWrites is the proxy's record of the operator's successful writes to the resources named by
// RecordWrites: when the API server's answer to each came back, by the object's new resourceVersion.
// A watcher sees a write later, by however long the watch and the test process lag on a loaded
// machine; a checker that orders the operator's writes against its other actions uses this instead.
type apiWrites struct {
	mu        sync.Mutex
	resources map[string]bool      // plural resource names, e.g. "statefulsets"
	at        map[string]time.Time // namespace/resource/name@resourceVersion -> answer time
}

// StartAPIFaultProxy starts the proxy with no errors injected (see setRate).
func StartAPIFaultProxy(t *testing.T, rng *rand.Rand) *apiFaultProxy {
	t.Helper()
	upstream, err := url.Parse(RESTConfig.Host)
	require.NoError(t, err)
	transport, err := rest.TransportFor(RESTConfig)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport, rp.FlushInterval = transport, -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // injected resets and API-server restarts are expected
	p := &apiFaultProxy{rng: rng}
	rp.ModifyResponse = p.writes.record
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kind := p.pick(); kind != "" {
			p.count(kind)
			switch kind {
			case "500":
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"chaos: injected","reason":"InternalError","code":500}`, http.StatusInternalServerError)
			case "429":
				w.Header().Set("Retry-After", "1")
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"chaos: injected","reason":"TooManyRequests","code":429}`, http.StatusTooManyRequests)
			default: // reset: close the connection without an answer
				if hj, ok := w.(http.Hijacker); ok {
					if conn, _, err := hj.Hijack(); err == nil {
						if tc, ok := conn.(*net.TCPConn); ok {
							_ = tc.SetLinger(0)
						}
						_ = conn.Close()
						return
					}
				}
				http.Error(w, "chaos: reset", http.StatusBadGateway)
			}
			return
		}
		if p.writes.wanted(r) {
			// JSON, so the answer's resourceVersion can be read; the client decodes what it gets.
			r.Header.Set("Accept", "application/json")
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// RecordWrites makes the proxy record the operator's successful writes (create, update, patch; not
// of a subresource) to the resources of these plural names, for WriteTime.
func (p *apiFaultProxy) RecordWrites(resources ...string) {
	p.writes.mu.Lock()
	defer p.writes.mu.Unlock()
	if p.writes.resources == nil {
		p.writes.resources, p.writes.at = map[string]bool{}, map[string]time.Time{}
	}
	for _, r := range resources {
		p.writes.resources[r] = true
	}
}

// WriteTime returns when the API server's answer came back for the operator's write that gave the
// object namespace/resource/name the given resourceVersion; false when the proxy saw no such answer
// (another client wrote it, or the answer was lost with the operator's connection).
func (p *apiFaultProxy) WriteTime(namespace, resource, name, resourceVersion string) (time.Time, bool) {
	p.writes.mu.Lock()
	defer p.writes.mu.Unlock()
	at, ok := p.writes.at[namespace+"/"+resource+"/"+name+"@"+resourceVersion]
	return at, ok
}

// writeTarget returns the namespace, resource and name a write request names, and whether it is a
// write of an object (not a list, not a subresource) of a recorded resource.
func (w *apiWrites) writeTarget(r *http.Request) (ns, resource, name string, ok bool) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return "", "", "", false
	}
	// /api/v1/namespaces/NS/RESOURCE[/NAME] or /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME]
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	i := slices.Index(parts, "namespaces")
	if i < 0 || len(parts) < i+3 || len(parts) > i+4 {
		return "", "", "", false
	}
	ns, resource = parts[i+1], parts[i+2]
	if len(parts) == i+4 {
		name = parts[i+3]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return ns, resource, name, w.resources[resource]
}

func (w *apiWrites) wanted(r *http.Request) bool {
	_, _, _, ok := w.writeTarget(r)
	return ok
}

// record is the proxy's response hook: it notes the answer time of a successful write it records.
func (w *apiWrites) record(resp *http.Response) error {
	ns, resource, _, ok := w.writeTarget(resp.Request)
	if !ok || resp.StatusCode/100 != 2 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	at := time.Now()
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return err
	}
	var obj struct {
		Metadata struct {
			Name            string `json:"name"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &obj) != nil || obj.Metadata.ResourceVersion == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// The first answer with this resourceVersion is the write that made it: a later write that changed
	// nothing (an apply of the same values) answers with the same resourceVersion.
	key := ns + "/" + resource + "/" + obj.Metadata.Name + "@" + obj.Metadata.ResourceVersion
	if _, seen := w.at[key]; !seen {
		w.at[key] = at
	}
	return nil
}

// setRate sets the fraction of requests failed from now on.
func (p *apiFaultProxy) setRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate = rate
}

func (p *apiFaultProxy) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate == 0 || p.rng.Float64() >= p.rate {
		return ""
	}
	return []string{"500", "429", "reset"}[p.rng.Intn(3)]
}

func (p *apiFaultProxy) count(kind string) {
	p.injected.Add(1)
	v, _ := p.byKind.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// counts returns the errors injected so far by kind.
func (p *apiFaultProxy) counts() map[string]int {
	out := map[string]int{}
	p.byKind.Range(func(k, v any) bool {
		out["api-error-"+k.(string)] = int(v.(*atomic.Int64).Load())
		return true
	})
	return out
}

// kubeconfig writes an admin kubeconfig that points at the proxy (plain HTTP on loopback; the proxy
// holds the credentials) for operators.Start, which adds the ServiceAccount impersonation.
func (p *apiFaultProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["chaos"] = &clientcmdapi.Cluster{Server: "http://" + p.addr}
	cfg.AuthInfos["chaos"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["chaos"] = &clientcmdapi.Context{Cluster: "chaos", AuthInfo: "chaos"}
	cfg.CurrentContext = "chaos"
	path := filepath.Join(t.TempDir(), "chaos-proxy.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

// APIErrorBursts is the API-error fault: for a random time the proxy fails a random fraction (5–30 %)
// of the operator's requests, then none again.
func (c *Campaign) APIErrorBursts(p *apiFaultProxy, maxBurst time.Duration) func(ctx context.Context, rng *rand.Rand) error {
	return func(ctx context.Context, rng *rand.Rand) error {
		rate := 0.05 + 0.25*rng.Float64()
		burst := time.Duration(rng.Int63n(int64(maxBurst))) + 500*time.Millisecond
		before := p.injected.Load()
		p.setRate(rate)
		select {
		case <-time.After(burst):
		case <-ctx.Done():
		}
		p.setRate(0)
		c.t.Logf("chaos: API error burst: %.0f%% of requests for %s, %d failed", 100*rate, burst.Round(time.Millisecond), p.injected.Load()-before)
		return nil
	}
}

// RecordProxyFaults adds the proxy's injected errors to the campaign's faults (once, at the end).
func (c *Campaign) RecordProxyFaults(p *apiFaultProxy) {
	for kind, n := range p.counts() {
		c.faults(kind, n)
	}
}
