// Command testapp is the app the e2e tests run on the real node. It records when it started and stopped
// and which pod it is, so a checker can prove from real timestamps that two processes never overlapped,
// that SIGTERM reached the app and how long the shutdown took.
//
// Flags (each may also be set by the environment variable in brackets; a flag given on the command line
// wins over the variable):
//
//	--record-dir DIR          [TESTAPP_RECORD_DIR]       also append the records to DIR/<pod-uid>.jsonl
//	                                                     (DIR/<hostname>.jsonl without POD_UID); off when ""
//	--shutdown-seconds S      [TESTAPP_SHUTDOWN_SECONDS] after SIGTERM (or SIGINT), take S seconds to shut
//	                                                     down (fractions allowed; default 0)
//	--exit-code N             [TESTAPP_EXIT_CODE]        exit code after a signal or --run-seconds (default 0)
//	--run-seconds S           [TESTAPP_RUN_SECONDS]      exit by itself after S seconds (default 0: run until
//	                                                     signalled)
//	--listen ADDR             [TESTAPP_LISTEN]           HTTP address (default ":8080"; "" = no server)
//	--not-ready-file FILE     [TESTAPP_NOT_READY_FILE]   /readyz answers 503 while FILE exists
//	--value-file FILE         [TESTAPP_VALUE_FILE]       the number in FILE is the gauge testapp_value
//	                                                     (0 when unset, missing or empty)
//	--crash-at-start N        [TESTAPP_CRASH_AT_START]   when N is not 0: record the start, then stop at
//	                                                     once with exit code N, before serving (never
//	                                                     Ready: under restartPolicy Always the kubelet
//	                                                     puts the container in CrashLoopBackOff)
//	--crash-file FILE         [TESTAPP_CRASH_FILE]       crash at start (--crash-at-start's code) only
//	                                                     while FILE exists, e.g. /records/$(POD_UID).crash
//	                                                     to break one pod, not its replacement
//	--version                                            print the version and exit (records nothing)
//
// `testapp resolve NAME...` instead looks each NAME up with the pod's resolver (its /etc/resolv.conf:
// the cluster DNS, search domains, ndots), records nothing and prints one line per name: "NAME ADDR..."
// (sorted), or "NAME NXDOMAIN" when the DNS says the name does not exist. Any other failure (no answer,
// a server error) is no answer about the name: it is printed to stderr and the exit code is 1.
//
// Pod identity comes from the downward API: POD_NAME, POD_NAMESPACE, POD_UID, NODE_NAME; the pod name
// falls back to the hostname (which is the pod name in Kubernetes anyway).
//
// Records are JSON lines, written to stdout (so `kubectl logs` shows them) and, with --record-dir, to the
// file (one write per line, O_APPEND: the restarts of one pod's container append to the same file). Every
// line has: time (wall clock, RFC 3339 with nanoseconds, UTC, fixed width), seq and mono_ns (order within
// one process: a counter and the monotonic time since the process started, immune to clock steps),
// event, instance (random, one per process: container restarts keep the pod UID and often PID 1), pid,
// hostname and pod {name, namespace, uid, node}. The events:
//
//	start    argv, version, listen (the address really bound); its time is the process's start
//	sigterm  shutdown_seconds (SIGINT is recorded as "sigint")
//	stop     exit_code, reason ("signal", "run-seconds", "crash-at-start" or the error that ended
//	         the app)
//
// A process killed by SIGKILL (grace period over) has a start and no stop.
//
// HTTP: GET /healthz → 200; GET /readyz → 200, or 503 while the --not-ready-file exists or once the app
// is shutting down; GET /metrics → Prometheus text with testapp_up, testapp_start_time_seconds and
// testapp_value; GET / → the pod identity as JSON.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/statefulops/statefulops/shared/version"
)

// timeFormat is RFC 3339 with nanoseconds, fixed width so that the strings also sort in time order.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

type options struct {
	recordDir       string
	shutdownSeconds float64
	exitCode        int
	runSeconds      float64
	listen          string
	notReadyFile    string
	valueFile       string
	crashAtStart    int
	crashFile       string
	version         bool
}

func main() {
	os.Exit(run(time.Now(), os.Args))
}

func run(started time.Time, args []string) int {
	if len(args) > 1 && args[1] == "resolve" {
		return resolve(context.Background(), net.DefaultResolver, args[2:], os.Stdout, os.Stderr)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	opts, err := parse(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		return 2
	}
	if opts.version {
		fmt.Println("testapp", version.Get())
		return 0
	}
	rec, err := newRecorder(started, opts.recordDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		return 1
	}
	defer rec.close()

	if crashNow(opts) {
		// Before the listener: the readiness probe never gets an answer, so the pod is never Ready.
		rec.record(record{Event: "start", Argv: args, Version: version.Get()})
		rec.record(record{Event: "stop", ExitCode: ptr(opts.crashAtStart), Reason: "crash-at-start"})
		return opts.crashAtStart
	}
	var shuttingDown atomic.Bool
	addr := ""
	if opts.listen != "" {
		ln, err := net.Listen("tcp", opts.listen)
		if err != nil {
			rec.record(record{Event: "start", Argv: args, Version: version.Get()})
			rec.record(record{Event: "stop", ExitCode: ptr(1), Reason: err.Error()})
			return 1
		}
		addr = ln.Addr().String()
		go func() { _ = http.Serve(ln, handler(opts, rec, &shuttingDown)) }()
	}
	rec.record(record{Event: "start", Argv: args, Version: version.Get(), Listen: addr})

	var runUntil <-chan time.Time
	if opts.runSeconds > 0 {
		runUntil = time.After(seconds(opts.runSeconds))
	}
	select {
	case sig := <-signals:
		shuttingDown.Store(true)
		event := "sigterm"
		if sig == syscall.SIGINT {
			event = "sigint"
		}
		rec.record(record{Event: event, ShutdownSeconds: ptr(opts.shutdownSeconds)})
		time.Sleep(seconds(opts.shutdownSeconds))
		rec.record(record{Event: "stop", ExitCode: ptr(opts.exitCode), Reason: "signal"})
	case <-runUntil:
		shuttingDown.Store(true)
		rec.record(record{Event: "stop", ExitCode: ptr(opts.exitCode), Reason: "run-seconds"})
	}
	return opts.exitCode
}

// crashNow reports whether the app stops at start: --crash-at-start, and the --crash-file exists when
// one is given.
func crashNow(o options) bool {
	if o.crashAtStart == 0 {
		return false
	}
	if o.crashFile == "" {
		return true
	}
	_, err := os.Stat(o.crashFile)
	return err == nil
}

// parse reads the flags, taking their defaults from the TESTAPP_* environment variables.
func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("testapp", flag.ContinueOnError)
	fs.StringVar(&o.recordDir, "record-dir", "", "also append the records to DIR/<pod-uid or hostname>.jsonl")
	fs.Float64Var(&o.shutdownSeconds, "shutdown-seconds", 0, "seconds to take for the shutdown after SIGTERM")
	fs.IntVar(&o.exitCode, "exit-code", 0, "exit code after a signal or --run-seconds")
	fs.Float64Var(&o.runSeconds, "run-seconds", 0, "exit by itself after this many seconds (0: run until signalled)")
	fs.StringVar(&o.listen, "listen", ":8080", `HTTP address ("" = no server)`)
	fs.StringVar(&o.notReadyFile, "not-ready-file", "", "/readyz answers 503 while this file exists")
	fs.StringVar(&o.valueFile, "value-file", "", "file holding the value of the gauge testapp_value")
	fs.IntVar(&o.crashAtStart, "crash-at-start", 0, "when not 0: stop at once with this exit code, before serving")
	fs.StringVar(&o.crashFile, "crash-file", "", "with --crash-at-start: crash only while this file exists")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := "TESTAPP_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && f.Name != "version" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.exitCode < 0 || o.exitCode > 255:
		return o, fmt.Errorf("--exit-code %d is not in 0..255", o.exitCode)
	case o.crashAtStart < 0 || o.crashAtStart > 255:
		return o, fmt.Errorf("--crash-at-start %d is not in 0..255", o.crashAtStart)
	case o.shutdownSeconds < 0 || o.runSeconds < 0:
		return o, errors.New("--shutdown-seconds and --run-seconds must not be negative")
	}
	return o, nil
}

// pod is the identity of the pod the app runs in.
type pod struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	UID       string `json:"uid,omitempty"`
	Node      string `json:"node,omitempty"`
}

// record is one line of the record.
type record struct {
	Time     string `json:"time"`
	Seq      int    `json:"seq"`
	MonoNS   int64  `json:"mono_ns"`
	Event    string `json:"event"`
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
	Hostname string `json:"hostname"`
	Pod      pod    `json:"pod"`

	Argv            []string `json:"argv,omitempty"`
	Version         string   `json:"version,omitempty"`
	Listen          string   `json:"listen,omitempty"`
	ShutdownSeconds *float64 `json:"shutdown_seconds,omitempty"`
	ExitCode        *int     `json:"exit_code,omitempty"`
	Reason          string   `json:"reason,omitempty"`
}

// recorder writes the records to stdout and to the record file.
type recorder struct {
	started  time.Time
	instance string
	hostname string
	pod      pod
	file     *os.File

	mu  sync.Mutex
	seq int
}

func newRecorder(started time.Time, dir string) (*recorder, error) {
	hostname, _ := os.Hostname()
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	r := &recorder{
		started:  started,
		instance: hex.EncodeToString(id),
		hostname: hostname,
		pod: pod{
			Name:      os.Getenv("POD_NAME"),
			Namespace: os.Getenv("POD_NAMESPACE"),
			UID:       os.Getenv("POD_UID"),
			Node:      os.Getenv("NODE_NAME"),
		},
	}
	if r.pod.Name == "" {
		r.pod.Name = hostname
	}
	if dir == "" {
		return r, nil
	}
	base := r.pod.UID
	if base == "" {
		base = hostname
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("record dir: %w", err)
	}
	path := filepath.Join(dir, strings.ReplaceAll(base, "/", "_")+".jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record file: %w", err)
	}
	r.file = f
	return r, nil
}

// record stamps rec and writes it as one line, with one write per destination. The start event carries
// the process's start time.
func (r *recorder) record(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if rec.Event == "start" {
		now = r.started
	}
	r.seq++
	rec.Time = now.UTC().Format(timeFormat)
	rec.Seq = r.seq
	rec.MonoNS = int64(now.Sub(r.started))
	rec.Instance = r.instance
	rec.PID = os.Getpid()
	rec.Hostname = r.hostname
	rec.Pod = r.pod
	line, _ := json.Marshal(rec)
	line = append(line, '\n')
	_, _ = os.Stdout.Write(line)
	if r.file != nil {
		if _, err := r.file.Write(line); err != nil {
			fmt.Fprintln(os.Stderr, "testapp: record file:", err)
		}
		if rec.Event == "stop" {
			_ = r.file.Sync()
		}
	}
}

func (r *recorder) close() {
	if r.file != nil {
		_ = r.file.Close()
	}
}

func handler(o options, rec *recorder, shuttingDown *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if shuttingDown.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if o.notReadyFile != "" {
			if _, err := os.Stat(o.notReadyFile); err == nil {
				http.Error(w, "not ready: "+o.notReadyFile+" exists", http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		value, err := readValue(o.valueFile)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# HELP testapp_up Whether the test app is up.\n# TYPE testapp_up gauge\ntestapp_up 1\n")
		fmt.Fprintf(w, "# HELP testapp_start_time_seconds Start time of the test app since the Unix epoch in seconds.\n"+
			"# TYPE testapp_start_time_seconds gauge\ntestapp_start_time_seconds %s\n",
			strconv.FormatFloat(float64(rec.started.UnixNano())/1e9, 'f', 3, 64))
		fmt.Fprintf(w, "# HELP testapp_value The number in the test app's --value-file (0 without one).\n"+
			"# TYPE testapp_value gauge\ntestapp_value %s\n", strconv.FormatFloat(value, 'g', -1, 64))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"pod": rec.pod, "hostname": rec.hostname, "instance": rec.instance, "version": version.Get(),
		})
	})
	return mux
}

// readValue reads the gauge value from file: 0 when file is "", missing or empty.
func readValue(file string) (float64, error) {
	if file == "" {
		return 0, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("value file %s: %w", file, err)
	}
	return v, nil
}

// resolve looks names up with r and prints one line per name (see the package doc); 2 for no names.
func resolve(ctx context.Context, r *net.Resolver, names []string, stdout, stderr io.Writer) int {
	if len(names) == 0 {
		fmt.Fprintln(stderr, "testapp resolve: no names")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code := 0
	for _, name := range names {
		addrs, err := r.LookupHost(ctx, name)
		var dnsErr *net.DNSError
		switch {
		case err == nil && len(addrs) == 0:
			fmt.Fprintf(stderr, "testapp resolve %s: no addresses and no error\n", name)
			code = 1
		case err == nil:
			slices.Sort(addrs)
			fmt.Fprintln(stdout, name, strings.Join(addrs, " "))
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			fmt.Fprintln(stdout, name, "NXDOMAIN")
		default:
			fmt.Fprintf(stderr, "testapp resolve %s: %v\n", name, err)
			code = 1
		}
	}
	return code
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func ptr[T any](v T) *T { return &v }
