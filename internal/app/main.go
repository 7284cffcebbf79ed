package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// Version is the warmpath version, set at build time with
// -ldflags "-X github.com/warmpath/warmpath/internal/app.Version=…".
var Version = "dev"

const usage = `warmpath routes LLM requests to the vLLM worker with the lowest predicted
time to first token. It runs as an Envoy external processor (ext_proc).

Usage:
  warmpath serve --config FILE          run the ext_proc and admin servers
  warmpath config validate FILE         check a config file; prints "ok" or every problem
  warmpath tokenize --tokenizer DIR     tokenize JSON lines from stdin (--chat for chat requests)
  warmpath kvevents tail|decode ...     print vLLM KV-cache events as JSON lines
  warmpath version                      print the version

Run "warmpath COMMAND --help" for a command's flags. The config file format is
described in the README and in internal/app/config.go.

Environment:
  WARMPATH_TIMERSLACK_NS                the process's timer slack in ns (default 250000;
                                        0 keeps the inherited one): see internal/timerslack
  GOMEMLIMIT                            the Go heap's soft limit; when unset, serve sets 90%
                                        of its container's memory limit (cgroup memory.max)
`

// Main runs the warmpath command line with args (without the program name).
// It returns nil on success and when ctx is cancelled (a signal), and an
// error, already worth printing, otherwise.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return run(ctx, args, os.Stdin, stdout, stderr)
}

// errUsage marks an error after which the usage text has been printed.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "config":
		return runConfig(rest, stdout, stderr)
	case "tokenize":
		return runTokenize(ctx, rest, stdin, stdout, stderr)
	case "kvevents":
		return runKVEvents(ctx, rest, stdin, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "warmpath", Version)
		return nil
	default:
		fmt.Fprintf(stderr, "warmpath: unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmpath serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "path of the YAML config file (required)")
	level := fs.String("log-level", "", "log level: debug, info, warn or error (overrides log.level)")
	extprocAddr := fs.String("extproc-addr", "", "ext_proc gRPC listen address (overrides listen.extproc)")
	adminAddr := fs.String("admin-addr", "", "admin HTTP listen address (overrides listen.admin)")
	drainDelay := fs.String("drain-delay", "", "time to keep serving after SIGTERM while health reports NOT_SERVING (overrides extproc.drain_delay)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: warmpath serve --config FILE [flags]

Serves Envoy's ext_proc protocol (gRPC, default 127.0.0.1:9002) and the admin HTTP API
(default :9090: /metrics, /healthz, /readyz, /debug/workers, POST /debug/lookup).
Prints one line "warmpath ready extproc=ADDR admin=ADDR" when it accepts requests.
On SIGINT/SIGTERM its gRPC health turns NOT_SERVING while it keeps serving new
streams for extproc.drain_delay (Envoy's health check takes it out of rotation),
then it stops accepting, in-flight streams drain for up to extproc.drain_timeout,
and it exits.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if *path == "" {
		fmt.Fprintln(stderr, "warmpath serve: --config is required")
		fs.Usage()
		return errUsage
	}
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	if *level != "" {
		cfg.Log.Level = *level
	}
	if *extprocAddr != "" {
		cfg.Listen.ExtProc = *extprocAddr
	}
	if *adminAddr != "" {
		cfg.Listen.Admin = *adminAddr
	}
	if *drainDelay != "" {
		d, err := time.ParseDuration(*drainDelay)
		if err != nil {
			return fmt.Errorf("--drain-delay: %w", err)
		}
		cfg.ExtProc.DrainDelay = d
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	// The process's soft memory limit follows its container's (memory.go).
	// serve does not set it: tests and the benchmarks embed serve in their
	// own processes.
	self, _ := os.ReadFile("/proc/self/cgroup") // none: only the root's files are read
	if limit, ok := softMemoryLimit(os.Getenv("GOMEMLIMIT"), os.DirFS("/sys/fs/cgroup"), string(self)); ok {
		debug.SetMemoryLimit(limit)
	}
	err = serve(ctx, cfg, embedOptions{}, stdout, stderr)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func runConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 || args[0] != "validate" {
		fmt.Fprintln(stderr, "Usage: warmpath config validate FILE\n\nStrictly decodes FILE, applies the defaults and prints \"ok\" or every problem found.")
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
	if _, err := LoadConfig(args[1]); err != nil {
		fmt.Fprintln(stdout, strings.TrimSpace(err.Error()))
		return errors.New("config is not valid")
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

// IsUsage reports whether err means the usage text was already printed.
func IsUsage(err error) bool { return errors.Is(err, errUsage) }
