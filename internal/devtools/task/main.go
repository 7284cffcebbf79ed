// Command task runs the Task build tool pinned in tools/go.mod, so that
// "go tool task" works at the repository root while Task and its
// dependencies stay out of the product's module graph.
//
// The product's go.mod declares this package as its only tool. It runs
//
//	go tool -modfile=ROOT/tools/go.mod task ARGS...
//
// in the current directory, where ROOT is the directory of the product's
// go.mod: -modfile makes the go command resolve and build Task from the tools
// module's requirements (tools/go.mod and tools/go.sum). A go.work listing
// both modules would do the same, but workspace mode selects one build list
// for both, so the product's own go commands (tests, the Dockerfile's build)
// would build against versions the tools raised.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		fmt.Fprintln(os.Stderr, "task: run it inside the warmpath module (go env GOMOD:", err, gomod+")")
		os.Exit(2)
	}
	modfile := filepath.Join(filepath.Dir(gomod), "tools", "go.mod")
	cmd := exec.Command("go", append([]string{"tool", "-modfile=" + modfile, "task"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The terminal sends ^C to the whole process group: Task handles it and
	// its exit status is ours. Catching (not ignoring) keeps the child's
	// default disposition.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code := exit.ExitCode()
		if code < 0 {
			code = 1
		}
		os.Exit(code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "task:", err)
		os.Exit(1)
	}
}
