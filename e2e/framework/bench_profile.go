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
// records Go CPU profiles over one measured window: of local operators (their --pprof-bind-address)
// and of the kube-apiserver (its /debug/pprof, on by default), which shares the 2 cores with them.

// CPUProfiles starts CPU profiles of window seconds of the kube-apiserver and of each operator in ops;
// the returned func waits for them (so call it once the measured window is over, at the latest). Each
// profile is written to $BENCH_OUT/profiles/<name>-<process>.pprof, its `go tool pprof -top` beside it
// (.txt), and the test's log gets the total CPU time of each process over the window. A profile that
// could not be taken is logged, never fatal: profiles explain figures, they are not figures.
func CPUProfiles(t *testing.T, name string, window time.Duration, ops ...*LocalOperator) (wait func()) {
	t.Helper()
	dir := filepath.Join(benchfmt.Dir(), "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("profiles: %v", err)
		return func() {}
	}
	seconds := strconv.Itoa(max(int(window.Round(time.Second)/time.Second), 1))
	ctx := context.WithoutCancel(t.Context())
	fetchers := map[string]func() ([]byte, error){
		"kube-apiserver": func() ([]byte, error) {
			return Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).
				Timeout(window + 30*time.Second).DoRaw(ctx)
		},
	}
	for _, o := range ops {
		url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%s", o.pprofPort, seconds)
		fetchers[o.name] = func() ([]byte, error) { return httpGet(ctx, url, window+30*time.Second) }
	}
	var wg sync.WaitGroup
	for process, fetch := range fetchers {
		wg.Go(func() {
			raw, err := fetch()
			if err != nil {
				t.Logf("profile %s of %s: %v", name, process, err)
				return
			}
			path := filepath.Join(dir, name+"-"+process+".pprof")
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Logf("profile %s of %s: %v", name, process, err)
				return
			}
			top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=30", path).CombinedOutput()
			if err != nil {
				t.Logf("profile %s of %s: go tool pprof: %v: %s", name, process, err, top)
				return
			}
			_ = os.WriteFile(strings.TrimSuffix(path, ".pprof")+".txt", top, 0o644)
			t.Logf("profile %s of %s (%s): %s", name, process, path, cpuTotal(string(top)))
		})
	}
	return wg.Wait
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
