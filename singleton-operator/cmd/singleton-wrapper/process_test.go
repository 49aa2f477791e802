package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
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
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/statefulops/statefulops/singleton-operator/internal/exitreport"
	"github.com/statefulops/statefulops/singleton-operator/internal/grant"
)

// These tests run the real singleton-wrapper and status-sidecar binaries as local processes against
// the real grant handler over TLS; only the token review is stubbed (the envtest suite of package grant
// covers it against a real API server), and the exit report goes to a handler of the test on the same
// server (exitReports). The app is this test binary itself (see TestMain), which records its argv,
// start time and signals; the wrapper that supervises it runs as the PID 1 of a PID namespace of its
// own, as in a container.

var binDir string

// wrapperBin is the wrapper as a pod runs it: the status-sidecar binary, installed by its postStart
// command (`status-sidecar install-wrapper <path>`) under the name singleton-wrapper.
var wrapperBin string

func TestMain(m *testing.M) {
	switch os.Getenv("WRAPPER_TEST_APP") {
	case "1":
		testApp()
		return
	case "grandchild":
		grandchild()
		return
	case "lock":
		holdLock()
		return
	}
	dir, err := os.MkdirTemp("", "singleton-wrapper-test-")
	if err != nil {
		panic(err)
	}
	build := exec.Command("go", "build", "-o", dir+"/", ".", "../status-sidecar")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		panic(fmt.Sprintf("building the binaries: %v", err))
	}
	binDir = dir
	wrapperBin = filepath.Join(dir, "pod", "singleton-wrapper")
	if err := os.Mkdir(filepath.Dir(wrapperBin), 0o755); err != nil {
		panic(err)
	}
	if out, err := exec.Command(filepath.Join(dir, "status-sidecar"), "install-wrapper", wrapperBin).CombinedOutput(); err != nil {
		panic(fmt.Sprintf("status-sidecar install-wrapper: %v: %s", err, out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// appRecord is what the test app writes when it starts.
type appRecord struct {
	Argv        []string `json:"argv"`
	StartedNano int64    `json:"startedNano"`
	PID         int      `json:"pid"`
	PPID        int      `json:"ppid"`
	// HostPID is the app's PID seen from the test, outside the wrapper's PID namespace: /proc is the
	// test's, so /proc/self names the process as the test does.
	HostPID int `json:"hostPid"`
}

// testApp is the wrapped "application": it records itself to $APP_OUT, then exits with $APP_EXIT if set,
// or waits for SIGTERM, records it to $APP_OUT.term and exits with 7; SIGHUP and SIGUSR1 are appended to
// $APP_OUT.signals. With $APP_GRANDCHILD set it first leaves a process of its own running, which it
// never waits for (grandchild).
func testApp() {
	started := time.Now().UnixNano()
	sigs := make(chan os.Signal, 4)
	signalNotify(sigs)
	out := os.Getenv("APP_OUT")
	if os.Getenv("APP_GRANDCHILD") != "" {
		self, _ := os.Executable()
		child := exec.Command(self)
		child.Env = append(os.Environ(), "WRAPPER_TEST_APP=grandchild")
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			os.Exit(98)
		}
	}
	raw, _ := json.Marshal(appRecord{Argv: os.Args[1:], StartedNano: started, PID: os.Getpid(), PPID: os.Getppid(), HostPID: hostPID()})
	_ = os.WriteFile(out+".tmp", raw, 0o644)
	_ = os.Rename(out+".tmp", out)
	if code := os.Getenv("APP_EXIT"); code != "" {
		var c int
		fmt.Sscan(code, &c)
		os.Exit(c)
	}
	timeout := time.After(time.Minute)
	for {
		select {
		case s := <-sigs:
			if s != syscall.SIGTERM {
				f, _ := os.OpenFile(out+".signals", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				fmt.Fprintln(f, s)
				f.Close()
				continue
			}
			_ = os.WriteFile(out+".term", []byte("SIGTERM"), 0o644)
			os.Exit(7)
		case <-timeout:
			os.Exit(99)
		}
	}
}

// grandchild is a process the test app leaves behind: it ignores SIGTERM (only SIGKILL ends it), records
// its PID as the test sees it to $APP_OUT.grandchild and sleeps.
func grandchild() {
	signal.Ignore(syscall.SIGTERM)
	out := os.Getenv("APP_OUT") + ".grandchild"
	_ = os.WriteFile(out+".tmp", []byte(strconv.Itoa(hostPID())), 0o644)
	_ = os.Rename(out+".tmp", out)
	time.Sleep(time.Minute)
}

func hostPID() int {
	link, _ := os.Readlink("/proc/self")
	pid, _ := strconv.Atoi(link)
	return pid
}

// holdLock plays a living wrapper for the sidecar's tests: it holds the lock of container $LOCK_NAME in
// the exit directory, says "locked" on stdout and sleeps until killed.
func holdLock() {
	if err := exitreport.HoldLock(exitreport.Dir(), os.Getenv("LOCK_NAME")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
}

// channelGrants is a Grants whose one pod is granted when the test closes the channel.
type channelGrants struct {
	uid types.UID
	ch  chan struct{}
}

func (g channelGrants) Granted(uid types.UID) <-chan struct{} {
	if uid == g.uid {
		return g.ch
	}
	return nil // never granted
}

// pod is one simulated pod: a grant server, a sidecar and a wrapped app sharing a signal directory and
// an exit directory.
type pod struct {
	t        *testing.T
	dir      string
	exitDir  string
	grantCh  chan struct{}
	reports  *exitReports
	wrapper  *exec.Cmd
	sidecar  *exec.Cmd
	exitCode chan int
	// sidecarExit receives the sidecar's exit code.
	sidecarExit chan int
	// stopGate, with podOptions.holdStop, is closed by the test to answer the stopping notice;
	// notices counts the notices received.
	stopGate chan struct{}
	notices  atomic.Int32
}

type podOptions struct {
	argv      []string
	appEnv    []string
	grantURL  string // overrides the test server (e.g. an unreachable address)
	tokenUID  string // the pod UID the token is bound to; default the pod's own
	noSidecar bool
	noWrapper bool
	// exit gives the pod the exit directory (the webhook's exit volume and environment); pid1 makes the
	// wrapper the PID 1 of a PID namespace of its own, as in a container.
	exit bool
	pid1 bool
	// apps are the sidecar's app containers (default "app", the wrapper's); exitAnswers the statuses
	// the exit endpoint answers in turn before 200.
	apps        []string
	exitAnswers []int
	// holdStop: the stopping notice is answered only once the test closes stopGate (the replacement
	// pod starting); otherwise at once.
	holdStop bool
}

const podUID = "0c5e6a3e-0000-4000-8000-000000000001"

func startPod(t *testing.T, o podOptions) *pod {
	t.Helper()
	p := &pod{t: t, dir: t.TempDir(), grantCh: make(chan struct{}), stopGate: make(chan struct{})}
	if !o.holdStop {
		close(p.stopGate)
	}
	p.exitDir = filepath.Join(p.dir, "exit")
	if o.apps == nil {
		o.apps = []string{"app"}
	}
	p.reports = &exitReports{dir: p.exitDir, answers: o.exitAnswers}
	tokenUID := o.tokenUID
	if tokenUID == "" {
		tokenUID = podUID
	}
	mux := http.NewServeMux()
	mux.Handle(grant.Path, &grant.Handler{
		Authenticate: func(_ context.Context, token string) (authenticationv1.UserInfo, error) {
			if token != "pod-token" {
				return authenticationv1.UserInfo{}, errors.New("bad token")
			}
			return authenticationv1.UserInfo{Username: "system:serviceaccount:ns:default", Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/pod-name": {"app-0"}, "authentication.kubernetes.io/pod-uid": {tokenUID}}}, nil
		},
		Grants:  channelGrants{uid: podUID, ch: p.grantCh},
		MaxWait: 2 * time.Second,
	})
	mux.Handle(grant.ExitPath, p.reports) // where the sidecar sends it, on the grant's server
	mux.HandleFunc(grant.StoppingPath, func(w http.ResponseWriter, r *http.Request) {
		p.notices.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // so the server notices a client that goes away (r.Context())
		select {
		case <-p.stopGate:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL + grant.Path
	if o.grantURL != "" {
		url = o.grantURL
	}
	signalFile := p.signalFile()
	require.NoError(t, os.Mkdir(filepath.Dir(signalFile), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(p.dir, "token"), []byte("pod-token\n"), 0o600))
	var sidecarEnv, wrapperEnv []string
	if o.exit {
		require.NoError(t, os.Mkdir(p.exitDir, 0o777))
		sidecarEnv = []string{"STATEFULSINGLETON_EXIT_DIR=" + p.exitDir, "STATEFULSINGLETON_APP_CONTAINERS=" + strings.Join(o.apps, ",")}
		wrapperEnv = []string{"STATEFULSINGLETON_EXIT_DIR=" + p.exitDir, "STATEFULSINGLETON_CONTAINER=app"}
	}

	if !o.noSidecar {
		p.sidecar = exec.Command(filepath.Join(binDir, "status-sidecar"))
		p.sidecar.Env = append(append(os.Environ(), "GRANT_URL="+url, "POD_NAMESPACE=ns", "POD_NAME=app-0", "POD_UID="+podUID,
			"GRANT_CA="+string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})),
			"GRANT_TOKEN_FILE="+filepath.Join(p.dir, "token"), "STATEFULSINGLETON_SIGNAL_FILE="+signalFile), sidecarEnv...)
		p.sidecar.Stderr = testWriter{t, "sidecar"}
		p.sidecarExit = startProcess(t, p.sidecar)
	}
	if o.noWrapper {
		return p
	}

	self, err := os.Executable()
	require.NoError(t, err)
	argv := append([]string{self}, o.argv...)
	raw, err := json.Marshal(argv)
	require.NoError(t, err)
	p.wrapper = exec.Command(wrapperBin)
	p.wrapper.Env = append(append(append(os.Environ(), "ORIGINAL_ENTRYPOINT="+string(raw), "STATEFULSINGLETON_SIGNAL_FILE="+signalFile,
		"WRAPPER_TEST_APP=1", "APP_OUT="+p.appOut()), wrapperEnv...), o.appEnv...)
	p.wrapper.Stderr = testWriter{t, "wrapper"}
	if o.pid1 {
		p.wrapper.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		if uid, gid := os.Getuid(), os.Getgid(); uid != 0 {
			// Without root, a user namespace of its own (mapped to this user) lets it have the PID one.
			p.wrapper.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			p.wrapper.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
			p.wrapper.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		}
	}
	// As the PID 1 of its namespace, its death at the cleanup takes every process of the namespace with it.
	p.exitCode = startProcess(t, p.wrapper)
	return p
}

// startProcess starts cmd and returns the channel that receives its exit code. The test's cleanup kills
// it and waits until it and the copy of its output are done (no log after the test's end).
func startProcess(t *testing.T, cmd *exec.Cmd) chan int {
	t.Helper()
	require.NoError(t, cmd.Start())
	exit, done := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(done)
		var exitErr *exec.ExitError
		switch err := cmd.Wait(); {
		case err == nil:
			exit <- 0
		case errors.As(err, &exitErr):
			exit <- exitErr.ExitCode()
		default:
			exit <- -1
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return exit
}

func (p *pod) signalFile() string { return filepath.Join(p.dir, "signal", "start-signal") }

// stoppingFile is the sidecar's fence: beside the signal file.
func (p *pod) stoppingFile() string { return filepath.Join(p.dir, "signal", "stopping") }

// stopFile is the sidecar's stop signal: beside the signal file.
func (p *pod) stopFile() string { return filepath.Join(p.dir, "signal", "stop-signal") }

// marker returns the content of the exit directory's marker of container name ("" when absent).
func (p *pod) marker(name string) string {
	raw, _ := os.ReadFile(filepath.Join(p.exitDir, name))
	return string(raw)
}

func (p *pod) setMarker(name, content string) {
	require.NoError(p.t, os.WriteFile(filepath.Join(p.exitDir, name), []byte(content), 0o644))
}

// createLock leaves the lock file of container name as a wrapper that is gone does: present and free.
func (p *pod) createLock(name string) {
	require.NoError(p.t, os.WriteFile(filepath.Join(p.exitDir, name+".lock"), nil, 0o644))
}

// holdLock starts a process that holds the lock of container name, as a living wrapper does, and
// returns once it does.
func (p *pod) holdLock(name string) *exec.Cmd {
	p.t.Helper()
	self, err := os.Executable()
	require.NoError(p.t, err)
	cmd := exec.CommandContext(p.t.Context(), self) // killed when the test ends
	cmd.Env = append(os.Environ(), "WRAPPER_TEST_APP=lock", "LOCK_NAME="+name, "STATEFULSINGLETON_EXIT_DIR="+p.exitDir)
	cmd.Stderr = testWriter{p.t, "lock " + name}
	out, err := cmd.StdoutPipe()
	require.NoError(p.t, err)
	require.NoError(p.t, cmd.Start())
	p.t.Cleanup(func() { _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(p.t, err)
	require.Equal(p.t, "locked\n", line)
	return cmd
}

// waitExit returns what ch receives within timeout (an exit code).
func waitExit(t *testing.T, ch <-chan int, timeout time.Duration, what string) int {
	t.Helper()
	select {
	case code := <-ch:
		return code
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", what, timeout)
		return 0
	}
}

// exitReports is the test's exit endpoint (grant.ExitHandler checks the pod against the API server; its
// tests cover that): it answers the statuses of answers in turn, then 200 {"recorded": true}, and records every
// request with the markers of the exit directory at the moment it arrived.
type exitReports struct {
	dir     string
	mu      sync.Mutex
	answers []int
	seen    []exitReportSeen
}

type exitReportSeen struct {
	method, auth string
	body         exitReportBody
	markers      map[string]string
}

type exitReportBody struct {
	Namespace  string   `json:"namespace"`
	Name       string   `json:"name"`
	UID        string   `json:"uid"`
	Containers []string `json:"containers"`
}

func (e *exitReports) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := exitReportSeen{method: r.Method, auth: r.Header.Get("Authorization"), markers: map[string]string{}}
	_ = json.NewDecoder(r.Body).Decode(&s.body)
	for _, name := range s.body.Containers {
		raw, _ := os.ReadFile(filepath.Join(e.dir, name))
		s.markers[name] = string(raw)
	}
	e.seen = append(e.seen, s)
	if n := len(e.seen) - 1; n < len(e.answers) {
		http.Error(w, "answer "+strconv.Itoa(n), e.answers[n])
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"recorded":true}` + "\n"))
}

func (e *exitReports) received() []exitReportSeen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

func (p *pod) appOut() string { return filepath.Join(p.dir, "app.json") }

// app returns the app's record once it has started, or nil.
func (p *pod) app() *appRecord {
	raw, err := os.ReadFile(p.appOut())
	if err != nil {
		return nil
	}
	var r appRecord
	require.NoError(p.t, json.Unmarshal(raw, &r))
	return &r
}

func (p *pod) waitStarted(timeout time.Duration) *appRecord {
	p.t.Helper()
	var r *appRecord
	require.Eventually(p.t, func() bool { r = p.app(); return r != nil }, timeout, time.Millisecond, "the app never started")
	return r
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s: %s", w.name, b)
	return len(b), nil
}

func TestWrapperBlocksUntilGrantedThenExecsTheExactArgv(t *testing.T) {
	argv := []string{"--name=a b", `--quote="x" 'y'`, "--list=a,b,c", "", "tab\there", "$(APP_VAR)", "$$(APP_VAR)", "$(UNDEFINED)", "]", "ünïcode"}
	p := startPod(t, podOptions{argv: argv, appEnv: []string{"APP_VAR=expanded"}})

	time.Sleep(1500 * time.Millisecond) // covers a long poll that ends without a grant
	require.Nil(t, p.app(), "the app must not start before the grant")

	close(p.grantCh)
	r := p.waitStarted(5 * time.Second)
	want := []string{"--name=a b", `--quote="x" 'y'`, "--list=a,b,c", "", "tab\there", "expanded", "$(APP_VAR)", "$(UNDEFINED)", "]", "ünïcode"}
	assert.Equal(t, want, r.Argv, "argv reaches the app exactly, $(VAR) expanded as the kubelet would")
	assert.Equal(t, p.wrapper.Process.Pid, r.PID, "the app replaced the wrapper (exec): it is the container's process")
}

func TestSIGTERMReachesTheAppAndItsExitCodeIsTheContainers(t *testing.T) {
	p := startPod(t, podOptions{})
	close(p.grantCh)
	p.waitStarted(5 * time.Second)
	require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
	select {
	case code := <-p.exitCode:
		assert.Equal(t, 7, code, "the app's exit code after SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit after SIGTERM")
	}
	assert.FileExists(t, p.appOut()+".term", "the app itself received SIGTERM")
}

func TestExitCodeIsPropagated(t *testing.T) {
	p := startPod(t, podOptions{appEnv: []string{"APP_EXIT=42"}})
	close(p.grantCh)
	select {
	case code := <-p.exitCode:
		assert.Equal(t, 42, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
}

func TestNoStartWithoutAReachableGrant(t *testing.T) {
	for name, o := range map[string]podOptions{
		"operator unreachable":     {grantURL: "https://127.0.0.1:1/v1/grant"},
		"token bound to other pod": {tokenUID: "another-uid"},
		"no sidecar":               {noSidecar: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := startPod(t, o)
			close(p.grantCh) // granted at the operator, but the pod cannot (or may not) learn it
			time.Sleep(2 * time.Second)
			assert.Nil(t, p.app(), "the app must never start")
			assert.NoFileExists(t, filepath.Join(p.dir, "signal", "start-signal"))
			select {
			case code := <-p.exitCode:
				t.Fatalf("the wrapper exited (%d) instead of holding", code)
			default:
			}
		})
	}
}

func TestSIGTERMBeforeTheGrantEndsTheWrapperWithoutStartingTheApp(t *testing.T) {
	p := startPod(t, podOptions{})
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
	select {
	case code := <-p.exitCode:
		assert.Equal(t, 143, code)
	case <-time.After(5 * time.Second):
		t.Fatal("the wrapper did not exit")
	}
	assert.Nil(t, p.app())
}

// The start after the grant: from the operator's grant (the channel closing in the grant server) to the
// app's first instruction, through the long poll, the signal file, inotify and exec. The test asserts
// the behaviour (the app never starts before its grant, and starts once granted, within waitStarted's
// bound); the latency is logged as p50/p99 here and measured against a baseline by make bench, not
// asserted (a loaded CI machine stretched the p99 of 40 runs to 1.7 s).
func TestStartLatencyAfterTheGrant(t *testing.T) {
	const runs = 40
	latencies := make([]time.Duration, runs)
	var wg sync.WaitGroup
	for i := range runs {
		p := startPod(t, podOptions{})
		time.Sleep(150 * time.Millisecond) // sidecar in its long poll, wrapper watching
		granted := time.Now()
		close(p.grantCh)
		r := p.waitStarted(5 * time.Second)
		latencies[i] = time.Unix(0, r.StartedNano).Sub(granted)
		assert.GreaterOrEqual(t, latencies[i], time.Duration(0), "run %d: the app started before its grant", i)
		_ = p.wrapper.Process.Signal(syscall.SIGTERM)
		wg.Add(1)
		go func() { defer wg.Done(); <-p.exitCode }()
	}
	wg.Wait()
	slices.Sort(latencies)
	p50, p99 := latencies[runs/2], latencies[(runs*99+99)/100-1]
	t.Logf("grant → app start over %d runs: p50 %v, p99 %v, max %v", runs, p50, p99, latencies[runs-1])
}

// `singleton-wrapper install <path>` puts an executable copy of itself there (the init container of pods
// admitted by older webhooks).
func TestInstallCopiesTheWrapper(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "singleton-wrapper")
	out, err := exec.Command(filepath.Join(binDir, "singleton-wrapper"), "install", dst).CombinedOutput()
	require.NoError(t, err, string(out))
	want, err := os.ReadFile(filepath.Join(binDir, "singleton-wrapper"))
	require.NoError(t, err)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	info, err := os.Stat(dst)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), info.Mode().Perm())
}

// The sidecar's postStart command puts an executable copy of the sidecar binary at the wrapper path;
// started under that name it is the wrapper (the tests above run that copy).
func TestSidecarInstallsItselfAsTheWrapper(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(binDir, "status-sidecar"))
	require.NoError(t, err)
	got, err := os.ReadFile(wrapperBin)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	info, err := os.Stat(wrapperBin)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), info.Mode().Perm())
}

// A malformed ORIGINAL_ENTRYPOINT fails the container instead of starting something else, for both
// binaries that can be the wrapper.
func TestMalformedEntrypointFails(t *testing.T) {
	for _, bin := range []string{wrapperBin, filepath.Join(binDir, "singleton-wrapper")} {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "ORIGINAL_ENTRYPOINT=/bin/app a b")
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, bin)
		assert.Equal(t, 126, exit.ExitCode(), bin)
	}
}

// The tests below cover the exit report (package internal/exitreport): the wrapper as a container's PID 1
// supervising its app, and the sidecar reporting the app's exit once the pod stops.

// alive tells whether the process with this PID (as the test sees it) exists: a zombie still does.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// As its container's PID 1, the wrapper runs the app as its child with the exact argv, forwards it the
// signals it receives and exits with its code. It records "running" while the app runs and "exited
// <code>" only once no process of the container is left: not the app, and not a process the app left
// behind that ignores SIGTERM (the kernel would have killed it with a PID 1 that exits).
func TestSupervisedAppGetsTheArgvAndSignalsAndLeavesNothingBehind(t *testing.T) {
	argv := []string{"--name=a b", "$(APP_VAR)", "$$(APP_VAR)"}
	p := startPod(t, podOptions{argv: argv, appEnv: []string{"APP_VAR=expanded", "APP_GRANDCHILD=1"}, exit: true, pid1: true})
	time.Sleep(300 * time.Millisecond)
	require.Nil(t, p.app(), "the app must not start before the grant")
	assert.NoFileExists(t, filepath.Join(p.exitDir, "app"), "no marker before the app starts")

	close(p.grantCh)
	r := p.waitStarted(5 * time.Second)
	assert.Equal(t, []string{"--name=a b", "expanded", "$(APP_VAR)"}, r.Argv)
	assert.Equal(t, 1, r.PPID, "the app is the child of the wrapper, its container's PID 1")
	assert.NotEqual(t, p.wrapper.Process.Pid, r.HostPID, "the app runs beside the wrapper, not in its place")
	assert.Equal(t, "running\n", p.marker("app"))
	var grandchild int
	require.Eventually(t, func() bool {
		raw, err := os.ReadFile(p.appOut() + ".grandchild")
		grandchild, _ = strconv.Atoi(string(raw))
		return err == nil && grandchild > 0
	}, 5*time.Second, time.Millisecond, "the app's own child never started")
	require.True(t, alive(grandchild))

	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1} {
		require.NoError(t, p.wrapper.Process.Signal(s))
	}
	require.Eventually(t, func() bool {
		raw, _ := os.ReadFile(p.appOut() + ".signals")
		got := strings.Fields(strings.ReplaceAll(string(raw), " ", "_"))
		slices.Sort(got)
		return slices.Equal(got, []string{"hangup", "user_defined_signal_1"})
	}, 5*time.Second, time.Millisecond, "SIGHUP and SIGUSR1 reach the app")
	assert.Equal(t, "running\n", p.marker("app"), "the app runs on after signals it handles")

	require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return p.marker("app") != "running\n" }, 10*time.Second, time.Millisecond, "no exit recorded")
	assert.False(t, alive(grandchild), "the app's child was still there when the exit was recorded")
	assert.Equal(t, "exited 7\n", p.marker("app"))
	assert.FileExists(t, p.appOut()+".term", "the app itself received SIGTERM")
	assert.Equal(t, 7, waitExit(t, p.exitCode, 10*time.Second, "the wrapper"), "the app's exit code is the container's")
}

// The container's exit code is the app's: its exit status, or 128+signal when a signal killed it.
func TestSupervisedExitCodeIsTheApps(t *testing.T) {
	for name, tc := range map[string]struct {
		appEnv []string
		kill   bool
		want   int
	}{
		"exit status":       {appEnv: []string{"APP_EXIT=42"}, want: 42},
		"killed by SIGKILL": {kill: true, want: 128 + 9},
	} {
		t.Run(name, func(t *testing.T) {
			p := startPod(t, podOptions{appEnv: tc.appEnv, exit: true, pid1: true})
			close(p.grantCh)
			r := p.waitStarted(5 * time.Second)
			if tc.kill {
				require.NoError(t, syscall.Kill(r.HostPID, syscall.SIGKILL))
			}
			assert.Equal(t, tc.want, waitExit(t, p.exitCode, 10*time.Second, "the wrapper"))
			assert.Equal(t, fmt.Sprintf("exited %d\n", tc.want), p.marker("app"))
		})
	}
}

// Once the sidecar has put up the fence (the pod is stopping), a wrapper that gets the start signal only
// now never starts its app, exits 143 and leaves the marker of the container's earlier run as it is.
func TestFencedWrapperNeverStartsTheApp(t *testing.T) {
	p := startPod(t, podOptions{exit: true, pid1: true})
	require.NoError(t, os.WriteFile(p.stoppingFile(), []byte("stopping\n"), 0o644))
	p.setMarker("app", "exited 0\n") // the container's earlier run
	close(p.grantCh)
	assert.Equal(t, 143, waitExit(t, p.exitCode, 10*time.Second, "the wrapper"))
	assert.FileExists(t, p.signalFile(), "the wrapper had the start signal")
	assert.Nil(t, p.app(), "the app must never start")
	assert.Equal(t, "exited 0\n", p.marker("app"), "the marker is left as it was")
}

// A wrapper that is not its container's PID 1 (a pod sharing its process namespace) execs the app as
// before and records nothing: the sidecar then reports nothing.
func TestWrapperNotPID1ExecsAndRecordsNothing(t *testing.T) {
	p := startPod(t, podOptions{exit: true})
	close(p.grantCh)
	r := p.waitStarted(5 * time.Second)
	assert.Equal(t, p.wrapper.Process.Pid, r.PID, "the app replaced the wrapper (exec)")
	require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 7, waitExit(t, p.exitCode, 10*time.Second, "the app"))
	entries, err := os.ReadDir(p.exitDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{exitreport.SidecarLock + ".lock"}, names, "no marker, no lock of the wrapper (only the sidecar's)")
}

// The whole pod stopping: the kubelet sends SIGTERM to the sidecar and the app container at once. The
// sidecar reports the exit, once the wrapper has recorded it, with the pod's token and identity.
func TestSupervisedPodReportsTheExit(t *testing.T) {
	p := startPod(t, podOptions{exit: true, pid1: true, appEnv: []string{"APP_GRANDCHILD=1"}})
	close(p.grantCh)
	p.waitStarted(5 * time.Second)
	require.NoError(t, p.sidecar.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 7, waitExit(t, p.exitCode, 10*time.Second, "the wrapper"))
	assert.Equal(t, 0, waitExit(t, p.sidecarExit, 5*time.Second, "the sidecar"))
	got := p.reports.received()
	require.Len(t, got, 1)
	assert.Equal(t, exitReportSeen{method: http.MethodPost, auth: "Bearer pod-token",
		body:    exitReportBody{Namespace: "ns", Name: "app-0", UID: podUID, Containers: []string{"app"}},
		markers: map[string]string{"app": "exited 7\n"}}, got[0], "the report, and the marker when it arrived")
	assert.FileExists(t, p.stoppingFile(), "the fence is up")
}

// While the pod stops, the app keeps running until the operator answers the stopping notice (the
// replacement pod runs): the wrapper holds the kubelet's SIGTERM back until the sidecar's stop signal,
// then passes it on; the exit is reported as always.
func TestSupervisedAppRunsUntilTheStopSignal(t *testing.T) {
	p := startPod(t, podOptions{exit: true, pid1: true, holdStop: true})
	close(p.grantCh)
	p.waitStarted(5 * time.Second)
	require.NoError(t, p.sidecar.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return p.notices.Load() == 1 }, 5*time.Second, time.Millisecond, "the stopping notice")
	time.Sleep(1500 * time.Millisecond) // beyond the wrapper's wait for the fence
	assert.NoFileExists(t, p.appOut()+".term", "the app got SIGTERM before the stop signal")
	assert.NoFileExists(t, p.stopFile())
	select {
	case code := <-p.exitCode:
		t.Fatalf("the wrapper exited (%d) before the stop signal", code)
	default:
	}
	close(p.stopGate)
	assert.Equal(t, 7, waitExit(t, p.exitCode, 10*time.Second, "the wrapper"))
	assert.FileExists(t, p.appOut()+".term", "the app itself received SIGTERM")
	assert.Equal(t, 0, waitExit(t, p.sidecarExit, 5*time.Second, "the sidecar"))
	require.Len(t, p.reports.received(), 1, "the exit reported")
}

// SIGTERM is passed on without the stop signal when nothing will write it: only the app container is
// being stopped (no fence: a failed liveness probe), or the sidecar is gone.
func TestSupervisedSIGTERMIsNotHeldWithoutAStoppingPod(t *testing.T) {
	t.Run("container only", func(t *testing.T) {
		p := startPod(t, podOptions{exit: true, pid1: true, holdStop: true})
		close(p.grantCh)
		p.waitStarted(5 * time.Second)
		require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 7, waitExit(t, p.exitCode, 3*time.Second, "the wrapper"))
		assert.Zero(t, p.notices.Load())
	})
	t.Run("sidecar gone", func(t *testing.T) {
		p := startPod(t, podOptions{exit: true, pid1: true, holdStop: true})
		close(p.grantCh)
		p.waitStarted(5 * time.Second)
		require.NoError(t, p.sidecar.Process.Signal(syscall.SIGTERM))
		require.NoError(t, p.wrapper.Process.Signal(syscall.SIGTERM))
		require.Eventually(t, func() bool { return p.notices.Load() == 1 }, 5*time.Second, time.Millisecond, "the stopping notice")
		require.NoError(t, p.sidecar.Process.Kill())
		assert.Equal(t, 7, waitExit(t, p.exitCode, 3*time.Second, "the wrapper"))
		assert.NoFileExists(t, p.stopFile())
	})
}

// The sidecar against a wrapper state the test lays out (what the wrappers of two app containers leave
// in the exit directory): it reports only once every app has exited, retrying 5xx answers.
func TestSidecarReportsOnceEveryAppExited(t *testing.T) {
	p := startPod(t, podOptions{exit: true, noWrapper: true, apps: []string{"web", "db"},
		exitAnswers: []int{http.StatusServiceUnavailable, http.StatusInternalServerError}})
	close(p.grantCh)
	require.Eventually(t, func() bool { _, err := os.Stat(p.signalFile()); return err == nil }, 5*time.Second, time.Millisecond)
	p.createLock("web")
	p.setMarker("web", "exited 0\n")
	db := p.holdLock("db")
	p.setMarker("db", "running\n")

	require.NoError(t, p.sidecar.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { _, err := os.Stat(p.stoppingFile()); return err == nil }, 5*time.Second, time.Millisecond, "no fence")
	time.Sleep(500 * time.Millisecond)
	assert.Empty(t, p.reports.received(), "reported while db's app runs")
	select {
	case code := <-p.sidecarExit:
		t.Fatalf("the sidecar exited (%d) while db's app runs", code)
	default:
	}

	// db's wrapper records the exit, then is gone.
	p.setMarker("db", "exited 143\n")
	require.NoError(t, db.Process.Kill())
	assert.Equal(t, 0, waitExit(t, p.sidecarExit, 3*time.Second, "the sidecar"))
	got := p.reports.received()
	require.Len(t, got, 3, "two failed attempts, then the report")
	want := exitReportSeen{method: http.MethodPost, auth: "Bearer pod-token",
		body:    exitReportBody{Namespace: "ns", Name: "app-0", UID: podUID, Containers: []string{"web", "db"}},
		markers: map[string]string{"web": "exited 0\n", "db": "exited 143\n"}}
	for i := range got {
		assert.Equal(t, want, got[i], "attempt %d", i)
	}
}

// Whatever exit the sidecar cannot vouch for, or an answer that refuses the report for good, ends it
// promptly without (another) report: the operator then waits for the kubelet, as without the report.
func TestSidecarEndsPromptlyWhenItCannotReport(t *testing.T) {
	for name, tc := range map[string]struct {
		apps    []string // default "app"
		answers []int
		noGrant bool
		// setup lays out the wrappers' state and returns what ends the last wrapper (nil: nothing).
		setup   func(p *pod) func()
		reports int
		within  time.Duration // from SIGTERM (or the end of the setup's wrapper) to the sidecar's exit
	}{
		"wrapper killed without recording the exit": {setup: func(p *pod) func() {
			p.setMarker("app", "running\n")
			w := p.holdLock("app")
			return func() { require.NoError(t, w.Process.Kill()) }
		}},
		"running, with the lock free": {setup: func(p *pod) func() {
			p.setMarker("app", "running\n")
			p.createLock("app")
			return nil
		}},
		"no marker": {setup: func(p *pod) func() { p.createLock("app"); return nil }},
		"no lock":   {setup: func(p *pod) func() { p.setMarker("app", "exited 0\n"); return nil }},
		"one unclean while the other's app still runs": {apps: []string{"other", "app"}, setup: func(p *pod) func() {
			p.setMarker("app", "running\n")
			p.createLock("app")
			p.setMarker("other", "running\n")
			p.holdLock("other")
			return nil
		}},
		"never granted": {noGrant: true, setup: func(p *pod) func() { return nil }},
		"404 pod gone":  {answers: []int{http.StatusNotFound}, reports: 1, setup: exitedApp},
		"409 refused":   {answers: []int{http.StatusConflict}, reports: 1, setup: exitedApp},
		"5xx until the budget is spent": {answers: slices.Repeat([]int{http.StatusServiceUnavailable}, 1000), reports: -1,
			setup: exitedApp, within: 4500 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			p := startPod(t, podOptions{exit: true, noWrapper: true, apps: tc.apps, exitAnswers: tc.answers})
			if !tc.noGrant {
				close(p.grantCh)
				require.Eventually(t, func() bool { _, err := os.Stat(p.signalFile()); return err == nil }, 5*time.Second, time.Millisecond)
			} else {
				time.Sleep(300 * time.Millisecond) // in its long poll
			}
			end := tc.setup(p)
			start := time.Now()
			require.NoError(t, p.sidecar.Process.Signal(syscall.SIGTERM))
			if end != nil {
				require.Eventually(t, func() bool { _, err := os.Stat(p.stoppingFile()); return err == nil }, 5*time.Second, time.Millisecond)
				time.Sleep(200 * time.Millisecond) // the sidecar waits on the lock
				select {
				case code := <-p.sidecarExit:
					t.Fatalf("the sidecar exited (%d) while the wrapper lives", code)
				default:
				}
				start = time.Now()
				end()
			}
			within := tc.within
			if within == 0 {
				within = time.Second
			}
			assert.Equal(t, 0, waitExit(t, p.sidecarExit, within, "the sidecar"))
			took := time.Since(start)
			t.Logf("the sidecar exited %s after it could know", took.Round(time.Millisecond))
			got := p.reports.received()
			switch tc.reports {
			case -1:
				assert.Greater(t, len(got), 5, "retries within the budget")
				assert.Greater(t, took, 2900*time.Millisecond, "gave up before the budget was spent")
			default:
				assert.Len(t, got, tc.reports)
			}
			assert.FileExists(t, p.stoppingFile(), "the fence is up")
			if tc.noGrant {
				assert.NoFileExists(t, p.signalFile(), "a start signal without a grant")
			}
		})
	}
}

// exitedApp lays out the state of a wrapper that recorded its app's exit and is gone.
func exitedApp(p *pod) func() {
	p.createLock("app")
	p.setMarker("app", "exited 0\n")
	return nil
}
