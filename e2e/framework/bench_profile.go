//go:build e2e && bench

package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

// A missed target needs the profile that shows where the time goes, not only the figure. CPUProfiles
// and CPUProfilesUntil record Go CPU profiles over one measured window: of local processes (their
// --pprof-bind-address) and of the kube-apiserver (its /debug/pprof, on by default), which shares the
// 2 cores with them.

// Profiled is a local process serving Go's profiles on a loopback port.
type Profiled struct {
	Name string
	Port int
}

// Profiled is the operator process's profiling endpoint (a new port at each Start).
func (o *LocalOperator) Profiled() Profiled { return Profiled{Name: o.name, Port: o.pprofPort} }

// cpuProfileSlice is the length of each profile CPUProfilesUntil takes back to back.
const cpuProfileSlice = 2 * time.Second

// CPUProfiles starts CPU profiles of window seconds of the kube-apiserver and of each process in procs;
// the returned func waits for them (so call it once the measured window is over, at the latest). Each
// profile is written to $BENCH_OUT/profiles/<name>-<process>.pprof, its `go tool pprof -top` beside it
// (.txt), and the test's log gets the total CPU time of each process over the window. A profile that
// could not be taken is logged, never fatal: profiles explain figures, they are not figures.
func CPUProfiles(t *testing.T, name string, window time.Duration, procs ...Profiled) (wait func()) {
	t.Helper()
	dir, ok := profileDir(t)
	if !ok {
		return func() {}
	}
	var wg sync.WaitGroup
	for process, fetch := range profileFetchers(t, procs) {
		wg.Go(func() {
			raw, err := fetch(window)
			if err != nil {
				t.Logf("profile %s of %s: %v", name, process, err)
				return
			}
			writeProfile(t, dir, name, process, raw)
		})
	}
	return wg.Wait
}

// CPUProfilesUntil is CPUProfiles over a window of unknown length: from now until the returned stop is
// called, in back-to-back profiles of cpuProfileSlice that stop merges (`go tool pprof -proto`) into one
// per process. The window ends up to one slice after stop is called, and stop waits for that. The
// slices stay beside the merged profile, in <name>-slices/<process>-<ms from the window's start>.pprof,
// for what happened when within the window.
func CPUProfilesUntil(t *testing.T, name string, procs ...Profiled) (stop func()) {
	t.Helper()
	dir, ok := profileDir(t)
	if !ok {
		return func() {}
	}
	parts := filepath.Join(dir, name+"-slices")
	if err := os.RemoveAll(parts); err != nil {
		t.Logf("profiles: %v", err)
		return func() {}
	}
	if err := os.MkdirAll(parts, 0o755); err != nil {
		t.Logf("profiles: %v", err)
		return func() {}
	}
	start := time.Now()
	t.Logf("profiles %s: window starts at %s", name, start.UTC().Format(time.RFC3339Nano))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for process, fetch := range profileFetchers(t, procs) {
		wg.Go(func() {
			var slices []string
			for i := 0; ; i++ {
				select {
				case <-done:
					writeMergedProfile(t, dir, name, process, slices)
					return
				default:
				}
				offset := time.Since(start).Milliseconds()
				raw, err := fetch(cpuProfileSlice)
				if err != nil {
					t.Logf("profile %s of %s, slice %d: %v", name, process, i, err)
					writeMergedProfile(t, dir, name, process, slices)
					return
				}
				path := filepath.Join(parts, fmt.Sprintf("%s-%07d.pprof", process, offset))
				if err := os.WriteFile(path, raw, 0o644); err != nil {
					t.Logf("profile %s of %s: %v", name, process, err)
					return
				}
				slices = append(slices, path)
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

func profileDir(t *testing.T) (string, bool) {
	dir := filepath.Join(benchfmt.Dir(), "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("profiles: %v", err)
		return "", false
	}
	return dir, true
}

// profileFetchers returns, per process name, a func that takes one CPU profile of the given length:
// the kube-apiserver's and each of procs'.
func profileFetchers(t *testing.T, procs []Profiled) map[string]func(time.Duration) ([]byte, error) {
	ctx := context.WithoutCancel(t.Context())
	seconds := func(d time.Duration) string { return strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1)) }
	fetchers := map[string]func(time.Duration) ([]byte, error){
		"kube-apiserver": func(d time.Duration) ([]byte, error) {
			return Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds(d)).
				Timeout(d + 30*time.Second).DoRaw(ctx)
		},
	}
	for _, p := range procs {
		if p.Port == 0 {
			continue // started without --pprof-bind-address
		}
		fetchers[p.Name] = func(d time.Duration) ([]byte, error) {
			url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%s", p.Port, seconds(d))
			return httpGet(ctx, url, d+30*time.Second)
		}
	}
	return fetchers
}

// writeMergedProfile merges the slices of one process into one profile and writes it.
func writeMergedProfile(t *testing.T, dir, name, process string, slices []string) {
	if len(slices) == 0 {
		t.Logf("profile %s of %s: no slice taken", name, process)
		return
	}
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), "go", append([]string{"tool", "pprof", "-proto"}, slices...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Logf("profile %s of %s: merging %d slices: %v: %s", name, process, len(slices), err, stderr.String())
		return
	}
	writeProfile(t, dir, name, process, raw)
}

// writeProfile writes one process's profile and its `go tool pprof -top` and logs its CPU total.
func writeProfile(t *testing.T, dir, name, process string, raw []byte) {
	path := filepath.Join(dir, name+"-"+process+".pprof")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Logf("profile %s of %s: %v", name, process, err)
		return
	}
	top, err := exec.CommandContext(context.WithoutCancel(t.Context()), "go", "tool", "pprof", "-top", "-nodecount=30", path).CombinedOutput()
	if err != nil {
		t.Logf("profile %s of %s: go tool pprof: %v: %s", name, process, err, top)
		return
	}
	_ = os.WriteFile(strings.TrimSuffix(path, ".pprof")+".txt", top, 0o644)
	t.Logf("profile %s of %s (%s): %s", name, process, path, cpuTotal(string(top)))
}

// cpuTotal is the "Duration: …, Total samples = …" line of a `go tool pprof -top` output: the CPU time
// the process used over the window.
func cpuTotal(top string) string {
	for line := range strings.Lines(top) {
		if strings.HasPrefix(line, "Duration:") {
			return strings.TrimSpace(line)
		}
	}
	return "no Duration line"
}

func httpGet(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, err
}
