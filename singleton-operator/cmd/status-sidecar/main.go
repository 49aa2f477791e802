// Command status-sidecar runs beside the app containers of a StatefulSingleton pod in Wrapper hold mode.
// It long-polls the singleton operator's grant endpoint (package internal/grant documents the protocol)
// with the pod's projected, pod-bound ServiceAccount token, and when the operator releases the pod it
// writes the start signal (/var/run/signal/start-signal) that the wrapped entrypoints wait for. Then it
// idles until the pod stops.
//
// It fails closed: an unreachable operator, a refused token or a malformed answer only means "not yet";
// it retries with back-off and never writes the signal without a grant.
//
// When the pod stops (SIGTERM), it reports the exit of the app processes, so that the operator releases
// the next pod without waiting for the kubelet to confirm the stop: it fences off any app start still to
// come, sends the stopping notice (/v1/stopping: answered once the pod's replacement runs, or at once
// when none can be prepared; spec.successorWait), writes the stop signal on which the wrappers pass
// SIGTERM on to their apps, waits until the wrapper of every app container has recorded that its app
// and every other process of its container are gone (package internal/exitreport), and posts {"namespace", "name", "uid",
// "containers"} to /v1/exited on the grant endpoint's server, with the same token, for at most
// reportBudget. A pod never released has nothing to report, and an exit the sidecar cannot vouch for (a
// wrapper that died uncleanly or recorded nothing) ends it at once without a report: the operator then
// waits for the kubelet, as without the report. The sidecar never delays the pod's stop by more than its
// app containers take plus reportBudget.
//
// Environment: POD_NAME, POD_NAMESPACE, POD_UID (downward API), GRANT_URL, optionally GRANT_CA (PEM),
// STATEFULSINGLETON_APP_CONTAINERS (the wrapped app containers, comma-separated; unset: no report);
// GRANT_TOKEN_FILE, STATEFULSINGLETON_SIGNAL_FILE (the fence sits beside it) and
// STATEFULSINGLETON_EXIT_DIR override the token, signal and exit paths.
//
// The same binary is the entrypoint wrapper of the app containers (package internal/wrapper): the
// sidecar is the pod's first container and its postStart hook, `status-sidecar install-wrapper <path>`,
// copies the binary into the pod's wrapper volume. The kubelet starts a pod's containers one after the
// other and waits for each postStart hook, so the app containers start only once the wrapper is in
// place — without an init container, whose exit the kubelet notices only at its next relist (up to a
// second on every pod start). Started under the name singleton-wrapper, the binary runs as the wrapper.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/singleton-operator/internal/exitreport"
	"github.com/statefulops/statefulops/singleton-operator/internal/wrapper"
)

// request and response mirror grant.Request and grant.Response (kept here so the sidecar binary does
// not link the operator's packages).
type request struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type response struct {
	Granted bool `json:"granted"`
}

// exitReport and exitAnswer mirror grant.ExitRequest and grant.ExitResponse, the exit report's body and
// 200 answer (kept here for the same reason).
type exitReport struct {
	request
	Containers []string `json:"containers"`
}

type exitAnswer struct {
	Recorded bool `json:"recorded"`
}

// exitedPath is the exit report's endpoint (grant.ExitPath) on the grant endpoint's server, stoppingPath
// the stopping notice's (grant.StoppingPath).
const (
	exitedPath   = "/v1/exited"
	stoppingPath = "/v1/stopping"
)

type config struct {
	url        string
	tokenFile  string
	signalFile string
	req        request
	client     *http.Client

	exitedURL    string
	stoppingURL  string
	exitDir      string
	stoppingFile string
	stopFile     string
	apps         []string // the wrapped app containers; none: no exit report
}

func main() {
	if filepath.Base(os.Args[0]) == filepath.Base(singletonv1.WrapperBinary) {
		wrapper.Main() // an app container's entrypoint
	}
	if len(os.Args) == 3 && os.Args[1] == "install-wrapper" {
		if err := wrapper.Install(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "status-sidecar: installing the wrapper: %v\n", err)
			os.Exit(1)
		}
		return
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	log.SetPrefix("status-sidecar: ")
	cfg, err := load()
	if err != nil {
		log.Fatalf("configuration: %v", err)
	}
	if len(cfg.apps) > 0 {
		// For its whole life: a wrapper holding its app's SIGTERM back for the stop signal stops waiting
		// when the sidecar is gone (exitreport.WaitStop).
		if err := exitreport.HoldLock(cfg.exitDir, exitreport.SidecarLock); err != nil {
			log.Printf("no sidecar lock: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	<-ctx.Done() // idle until the pod stops: a restarted sidecar would only ask again
	reportExit(cfg)
}

func load() (config, error) {
	cfg := config{
		url:        os.Getenv("GRANT_URL"),
		tokenFile:  envOr("GRANT_TOKEN_FILE", singletonv1.GrantTokenDir+"/token"),
		signalFile: envOr("STATEFULSINGLETON_SIGNAL_FILE", singletonv1.StartSignalFile),
		req:        request{Namespace: os.Getenv("POD_NAMESPACE"), Name: os.Getenv("POD_NAME"), UID: os.Getenv("POD_UID")},
		exitDir:    exitreport.Dir(),
		apps:       strings.FieldsFunc(os.Getenv(singletonv1.EnvAppContainers), func(r rune) bool { return r == ',' }),
	}
	if cfg.url == "" || cfg.req.Namespace == "" || cfg.req.Name == "" || cfg.req.UID == "" {
		return cfg, errors.New("GRANT_URL, POD_NAMESPACE, POD_NAME and POD_UID must be set")
	}
	cfg.stoppingFile = exitreport.StoppingFile(cfg.signalFile)
	cfg.stopFile = exitreport.StopSignalFile(cfg.signalFile)
	u, err := url.Parse(cfg.url)
	if err != nil {
		return cfg, fmt.Errorf("GRANT_URL: %w", err)
	}
	u.Path, u.RawPath, u.RawQuery = exitedPath, "", ""
	cfg.exitedURL = u.String()
	u.Path = stoppingPath
	cfg.stoppingURL = u.String()
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := os.Getenv("GRANT_CA"); ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return cfg, errors.New("GRANT_CA holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	cfg.client = grantClient(tlsConfig)
	return cfg, nil
}

// grantClient is the long poll's HTTP client. The server holds a request up to 30 s, so the whole
// request may take a little longer than that; connecting may not. A connect that does not complete in
// connectTimeout is a SYN sent to an operator pod that is gone (during an operator upgrade, its network
// namespace torn down before kube-proxy dropped it from the grant Service): dialing again picks an
// endpoint anew, where waiting out the request's timeout kept a held pod from its start for 45 s
// (measured on the real node by e2e/singleton's TestSingletonUpgradeUnderLoad).
func grantClient(tlsConfig *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 5 * time.Second}
	return &http.Client{Timeout: 45 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     tlsConfig,
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: connectTimeout,
	}}
}

// connectTimeout bounds the TCP connect and the TLS handshake of one request to the grant endpoint.
const connectTimeout = 2 * time.Second

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run asks until the pod is granted and writes the start signal. A signal file already present (the
// sidecar restarted after the grant) ends it at once.
func run(ctx context.Context, cfg config) error {
	if _, err := os.Stat(cfg.signalFile); err == nil {
		log.Printf("start signal already present")
		return nil
	}
	backoff := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		granted, err := ask(ctx, cfg)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			log.Printf("no grant yet: %v", err)
			if err := backoff.wait(ctx); err != nil {
				return err
			}
		case granted:
			if err := writeSignal(cfg.signalFile); err != nil {
				return fmt.Errorf("writing the start signal: %w", err)
			}
			log.Printf("start granted; signal written to %s", cfg.signalFile)
			return nil
		default:
			backoff.reset() // a long poll ended without a grant: ask again at once
		}
	}
}

// ask sends one long-poll request.
func ask(ctx context.Context, cfg config) (bool, error) {
	resp, err := post(ctx, cfg, cfg.url, cfg.req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, statusError(resp)
	}
	var r response
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&r); err != nil {
		return false, fmt.Errorf("decoding the answer: %w", err)
	}
	return r.Granted, nil
}

// post sends body as JSON to the operator with the pod's token. The token is read on every request
// because the kubelet rotates it.
func post(ctx context.Context, cfg config, target string, body any) (*http.Response, error) {
	token, err := os.ReadFile(cfg.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading the token: %w", err)
	}
	raw, _ := json.Marshal(body) // structs of strings always marshal
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	return cfg.client.Do(req)
}

// statusError describes an answer other than 200.
func statusError(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

// reportBudget bounds the exit report's attempts, reportRetry is the pause between two.
const (
	reportBudget = 3 * time.Second
	reportRetry  = 100 * time.Millisecond
)

// reportExit runs once the pod stops: it fences off the app containers' start, waits until every app has
// exited and reports it (package doc). It logs why it reports nothing.
func reportExit(cfg config) {
	if len(cfg.apps) == 0 {
		return // a pod admitted before the exit report
	}
	if info, err := os.Stat(cfg.exitDir); err != nil || !info.IsDir() {
		log.Printf("no exit report: no exit directory %s", cfg.exitDir)
		return
	}
	// First, so that no app starts after the markers are read: a wrapper that passed the fence wrote
	// "running" before.
	if err := exitreport.Fence(cfg.exitDir, cfg.stoppingFile); err != nil {
		log.Printf("no exit report: fencing the app containers' start: %v", err)
		signalStop(cfg)
		return
	}
	if _, err := os.Stat(cfg.signalFile); err != nil {
		log.Printf("stopping before the start grant: no app ran, nothing to report")
		signalStop(cfg)
		return
	}
	// The apps keep running until the operator says the replacement runs (or none is coming); the
	// notice also has the token reviewed and the connection opened for the report.
	notifyStopping(cfg)
	signalStop(cfg)
	if err := waitExited(cfg.exitDir, cfg.apps); err != nil {
		log.Printf("no exit report: %v", err)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), reportBudget)
	defer cancel()
	for {
		done, err := sendReport(ctx, cfg)
		switch {
		case done && err == nil:
			log.Printf("exit of %v reported", cfg.apps)
			return
		case done:
			log.Printf("exit report refused: %v", err) // 404: the pod is gone already
			return
		}
		log.Printf("exit report failed: %v", err)
		select {
		case <-ctx.Done():
			log.Printf("no exit report: gave up after %s", reportBudget)
			return
		case <-time.After(reportRetry):
		}
	}
}

// stoppingNoticeBudget bounds the stopping notice: above the operator's longest answer (successorWait
// is at most 30 s), below the client's timeout.
const stoppingNoticeBudget = 35 * time.Second

// notifyStopping sends the stopping notice (grant.StoppingPath) and returns once the operator answers:
// the replacement pod runs and waits for its grant, none is coming, or spec.successorWait is up. It
// also has the token reviewed and the connection opened, so the exit report's round trip is the
// annotation's write only. Whatever fails only means the apps are stopped now.
func notifyStopping(cfg config) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), stoppingNoticeBudget)
	defer cancel()
	resp, err := post(ctx, cfg, cfg.stoppingURL, cfg.req)
	if err != nil {
		log.Printf("stopping notice failed: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		log.Printf("stopping notice refused: %v", statusError(resp))
	} else {
		log.Printf("stopping notice answered after %s", time.Since(start).Round(time.Millisecond))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // so the connection is reused
}

// signalStop writes the stop signal: the wrappers pass SIGTERM on to their apps.
func signalStop(cfg config) {
	if err := exitreport.SignalStop(cfg.stopFile); err != nil {
		log.Printf("writing the stop signal: %v (the wrappers pass SIGTERM on after their longest wait)", err)
	}
}

// waitExited returns once the marker of every app container says "exited", or at the first one whose
// exit cannot be vouched for. The containers are waited for together, so a wrapper that died uncleanly
// ends the wait at once, not after the others' apps stop.
func waitExited(dir string, apps []string) error {
	errs := make(chan error, len(apps))
	for _, name := range apps {
		go func() {
			_, err := exitreport.WaitExited(dir, name)
			errs <- err
		}()
	}
	for range apps {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// sendReport posts the exit report once. done: recorded, or refused for good (404, 409; err says why);
// otherwise err is worth a retry.
func sendReport(ctx context.Context, cfg config) (done bool, err error) {
	resp, err := post(ctx, cfg, cfg.exitedURL, exitReport{request: cfg.req, Containers: cfg.apps})
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var a exitAnswer
		if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&a); err != nil || !a.Recorded {
			return false, errors.New(`a 200 answer without {"recorded": true}`)
		}
		return true, nil
	case http.StatusNotFound, http.StatusConflict:
		return true, statusError(resp)
	default:
		return false, statusError(resp)
	}
}

// writeSignal creates the signal file through a rename, so the wrappers see it appear complete.
func writeSignal(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".start-signal-*")
	if err != nil {
		return err
	}
	// Readable by the app containers, whatever user they run as.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if _, err := fmt.Fprintf(tmp, "granted %s\n", time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// backoff waits longer after each consecutive failure, up to max.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay, next: minDelay}
}

func (b *backoff) reset() { b.next = b.min }

func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, b.max)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
