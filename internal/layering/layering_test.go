package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	module    = "github.com/warmpath/warmpath"
	goczmq    = "github.com/zeromq/goczmq"
	clocktest = module + "/internal/clocktest"
	// timerslack sets the process's timer slack when the program loads: a
	// process-wide effect only the command's wiring may choose.
	timerslack = module + "/internal/timerslack"
)

// pureGo are the patterns of the packages that must build without cgo.
var pureGo = []string{module + "/kvindex", module + "/scoring", module + "/tokenize/..."}

// pkg is what `go list -json` says of a package, the fields the rules read.
type pkg struct {
	ImportPath string
	Standard   bool
	CgoFiles   []string
	Imports    []string // of the package's own files, not its tests'
}

// isE2E reports whether path lies in the end-to-end test tree.
func isE2E(path string) bool {
	return path == module+"/e2e" || strings.HasPrefix(path, module+"/e2e/")
}

// inModule reports whether path is one of warmpath's packages.
func inModule(path string) bool {
	return path == module || strings.HasPrefix(path, module+"/")
}

// cgoDeps returns a violation for each package in deps, the dependencies
// of the pure-Go packages, that is goczmq or uses cgo. The standard
// library's cgo (net, os/user) is not counted: it has a pure-Go fallback
// that CGO_ENABLED=0 selects.
func cgoDeps(deps []pkg) []string {
	var out []string
	for _, p := range deps {
		if p.Standard {
			continue
		}
		if p.ImportPath == goczmq || len(p.CgoFiles) > 0 || slices.Contains(p.Imports, "C") {
			out = append(out, fmt.Sprintf("%s uses cgo; imported by %s", p.ImportPath, strings.Join(importers(deps, p.ImportPath), ", ")))
		}
	}
	return out
}

// importers returns the packages in pkgs that import path.
func importers(pkgs []pkg, path string) []string {
	var out []string
	for _, p := range pkgs {
		if slices.Contains(p.Imports, path) {
			out = append(out, p.ImportPath)
		}
	}
	return out
}

// productionImports returns a violation for each import a production
// package (one of the module's outside e2e/) makes of e2e/ or of
// internal/clocktest, of goczmq outside kvevents, and of
// internal/timerslack outside internal/app.
func productionImports(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if !inModule(p.ImportPath) || isE2E(p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			switch {
			case isE2E(imp), imp == clocktest:
				out = append(out, fmt.Sprintf("production package %s imports %s", p.ImportPath, imp))
			case imp == goczmq && p.ImportPath != module+"/kvevents":
				out = append(out, fmt.Sprintf("%s imports goczmq, which only kvevents may", p.ImportPath))
			case imp == timerslack && p.ImportPath != module+"/internal/app":
				out = append(out, fmt.Sprintf("%s imports internal/timerslack, which only internal/app may", p.ImportPath))
			}
		}
	}
	return out
}

// TestRules holds the rules to hand-made module graphs, so that each is
// known to fail when broken.
func TestRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule func([]pkg) []string
		pkgs []pkg
		want int // violations
	}{
		{"pure packages over pure ones", cgoDeps, []pkg{
			{ImportPath: module + "/kvindex", Imports: []string{"github.com/zeebo/xxh3"}},
			{ImportPath: "github.com/zeebo/xxh3"}}, 0},
		{"the standard library's cgo", cgoDeps, []pkg{
			{ImportPath: "net", Standard: true, CgoFiles: []string{"cgo_unix.go"}, Imports: []string{"C"}},
			{ImportPath: module + "/scoring", Imports: []string{"net"}}}, 0},
		{"kvindex importing goczmq", cgoDeps, []pkg{
			{ImportPath: module + "/kvindex", Imports: []string{goczmq}},
			{ImportPath: goczmq, CgoFiles: []string{"sock.go"}, Imports: []string{"C"}}}, 1},
		{"a dependency with cgo files", cgoDeps, []pkg{
			{ImportPath: module + "/tokenize", Imports: []string{"example.com/fast"}},
			{ImportPath: "example.com/fast", CgoFiles: []string{"fast.go"}}}, 1},
		{"a dependency importing C", cgoDeps, []pkg{{ImportPath: "example.com/c", Imports: []string{"C"}}}, 1},
		{"production over production", productionImports, []pkg{
			{ImportPath: module + "/extproc", Imports: []string{module + "/scoring"}},
			{ImportPath: module + "/kvevents", Imports: []string{goczmq, module + "/kvindex"}}}, 0},
		{"e2e importing anything", productionImports, []pkg{
			{ImportPath: module + "/e2e/harness", Imports: []string{module + "/e2e/vllmsim", goczmq}},
			{ImportPath: module + "/e2e", Imports: []string{module + "/e2e/harness"}}}, 0},
		{"production importing e2e", productionImports, []pkg{
			{ImportPath: module + "/internal/app", Imports: []string{module + "/e2e/vllmsim"}},
			{ImportPath: module + "/cmd/warmpath", Imports: []string{module + "/e2e"}}}, 2},
		{"production importing clocktest", productionImports, []pkg{
			{ImportPath: module + "/scoring", Imports: []string{clocktest}},
			{ImportPath: module + "/internal/app", Imports: []string{module + "/scoring", clocktest}}}, 2},
		{"e2e importing clocktest", productionImports, []pkg{
			{ImportPath: module + "/e2e/replay", Imports: []string{clocktest}}}, 0},
		{"goczmq outside kvevents", productionImports, []pkg{
			{ImportPath: module + "/discovery", Imports: []string{goczmq}}}, 1},
		{"timerslack from the wiring", productionImports, []pkg{
			{ImportPath: module + "/internal/app", Imports: []string{timerslack}}}, 0},
		{"timerslack elsewhere", productionImports, []pkg{
			{ImportPath: module + "/scoring", Imports: []string{timerslack}},
			{ImportPath: module + "/e2e/harness", Imports: []string{timerslack}}}, 1},
		{"other modules are not checked", productionImports, []pkg{
			{ImportPath: "example.com/x", Imports: []string{module + "/e2e"}}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.rule(tc.pkgs); len(got) != tc.want {
				t.Errorf("%d violations %q, want %d", len(got), got, tc.want)
			}
		})
	}
}

// TestPureGo checks that kvindex, scoring and tokenize depend on nothing
// that uses cgo, and that they build with CGO_ENABLED=0.
func TestPureGo(t *testing.T) {
	t.Parallel()
	deps := goList(t, append([]string{"-deps"}, pureGo...)...)
	if len(deps) < 20 {
		t.Fatalf("go list found %d packages", len(deps))
	}
	for _, v := range cgoDeps(deps) {
		t.Error(v)
	}
	if out, err := goCmd(t, []string{"CGO_ENABLED=0"}, append([]string{"build"}, pureGo...)...); err != nil {
		t.Errorf("CGO_ENABLED=0 go build %s: %v\n%s", strings.Join(pureGo, " "), err, out)
	}
}

// TestProductionImports checks that no production package imports e2e/ or
// internal/clocktest, that only kvevents imports goczmq, and that only
// internal/app imports internal/timerslack. Test files
// may import either: go list's Imports leaves out their imports.
func TestProductionImports(t *testing.T) {
	t.Parallel()
	pkgs := goList(t, module+"/...")
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == module+"/kvevents" && slices.Contains(p.Imports, goczmq) }) {
		t.Fatal("kvevents does not import goczmq: the listing is not the module's")
	}
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == clocktest }) {
		t.Fatalf("no package %s: the rule guards a path that does not exist", clocktest)
	}
	for _, v := range productionImports(pkgs) {
		t.Error(v)
	}
}

// goList runs `go list -json args` and decodes its output.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	out, err := goCmd(t, nil, append([]string{"list", "-json"}, args...)...)
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return pkgs
		}
		if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

// goCmd runs the go command with env added; stdout and stderr come back
// together when it fails, stdout alone otherwise.
func goCmd(t *testing.T, env []string, args ...string) ([]byte, error) {
	t.Helper()
	gobin, err := exec.LookPath("go") // go test puts its own first on PATH
	if err != nil {
		t.Fatalf("no go command: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), gobin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}
