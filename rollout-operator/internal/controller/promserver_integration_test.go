//go:build integration

package controller

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The checks are tested against a real Prometheus server: Debian's prometheus package
// (/usr/bin/prometheus, installed by the Makefile and .ci/run), started here on a loopback port with
// its own configuration and storage in a temporary directory, scraping an exporter the test controls.

const prometheusBinary = "/usr/bin/prometheus"

// exporter serves gauges on /metrics in the text exposition format; the test sets their values.
type exporter struct {
	mu     sync.Mutex
	gauges map[string]string // "name{labels}" → value
	srv    *httptest.Server
}

func newExporter(t *testing.T) *exporter {
	t.Helper()
	e := &exporter{gauges: map[string]string{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		for k, v := range e.gauges {
			fmt.Fprintf(w, "%s %s\n", k, v)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// set sets a series' value; "" removes the series.
func (e *exporter) set(series, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if value == "" {
		delete(e.gauges, series)
		return
	}
	e.gauges[series] = value
}

// promServer is one running Prometheus process.
type promServer struct {
	t    *testing.T
	URL  string // http://127.0.0.1:port
	cmd  *exec.Cmd
	dir  string
	port int
	done chan struct{}
}

// requirePrometheus fails the test when the Prometheus binary is missing: `make host-deps` (run by
// `make test-integration`) installs Debian's package, so a missing binary is a setup error, not a skip.
func requirePrometheus(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(prometheusBinary); err != nil {
		t.Fatalf("%s missing (apt-get install -y prometheus): %v", prometheusBinary, err)
	}
}

// startPrometheus runs Prometheus scraping target (host:port) every 200ms.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	requirePrometheus(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 200ms
  scrape_timeout: 150ms
  evaluation_interval: 1s
scrape_configs:
  - job_name: app
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &promServer{t: t, dir: dir, port: freeLoopbackPort(t)}
	p.URL = fmt.Sprintf("http://127.0.0.1:%d", p.port)
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *promServer) start() {
	p.t.Helper()
	p.cmd = exec.Command(prometheusBinary,
		"--config.file="+filepath.Join(p.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p.port),
		"--query.lookback-delta=2s",
		"--log.level=warn")
	log, err := os.Create(filepath.Join(p.dir, "prometheus.log"))
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); _ = log.Close(); close(done) }(p.cmd, p.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
			p.t.Fatalf("Prometheus did not become ready: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop terminates Prometheus and waits for it; safe to call twice.
func (p *promServer) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// hostPort returns the host:port of a URL.
func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitForResult polls the checker until it returns want, failing after 15s.
func waitForVerdict(t *testing.T, q Query, want Verdict) CheckResult {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res := PromChecker{}.Check(context.Background(), q)
		if res.Verdict == want {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("verdict %s, want %s: %s", res.Verdict, want, res.Message)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// authProxy puts credentials in front of Prometheus (Prometheus itself has no bearer-token
// authentication): it forwards only requests carrying the wanted Authorization header.
func authProxy(t *testing.T, upstream string, tls bool, wantAuth string) string {
	t.Helper()
	up, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(up)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wantAuth != "" && r.Header.Get("Authorization") != wantAuth {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv.URL
}
