package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/warmpath/warmpath/e2e/replay"
)

const usage = `usage:
  replay run --config FILE [--target LABEL=URL]... [--url URL --label LABEL] [--seed N] [--out DIR] [--baseline LABEL] [--salt]
  replay compare [--out DIR] [--baseline LABEL] REPORT.json...

run replays the workload of the config file (YAML or JSON, unknown fields
are errors) against each target in turn with the same seed and arrival
times, writes DIR/LABEL.json per target, and DIR/comparison.md and the plots
DIR/ttft-cdf.{svg,png} and DIR/goodput-vs-load.{svg,png} comparing them.
compare does the same from reports written earlier.

Config fields are those of replay.Config (go doc
github.com/warmpath/warmpath/e2e/replay Config); examples are in
e2e/cmd/replay/examples/.
`

// Main runs the replay command with args (without the program name). It
// returns nil on success, on -help and when ctx is cancelled after the
// partial reports were written.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing subcommand")
	}
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "compare":
		return compareCmd(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
}

// targets collects repeated --target LABEL=URL flags in order.
type targets []target

type target struct{ label, url string }

func (t *targets) String() string { return fmt.Sprint(*t) }

func (t *targets) Set(v string) error {
	label, url, ok := strings.Cut(v, "=")
	if !ok || label == "" || url == "" {
		return fmt.Errorf("target %q is not LABEL=URL", v)
	}
	for _, x := range *t {
		if x.label == label {
			return fmt.Errorf("target label %q given twice", label)
		}
	}
	*t = append(*t, target{label, url})
	return nil
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tgts       targets
		configPath = fs.String("config", "", "workload, load, clients and SLO `file` (YAML or JSON)")
		url        = fs.String("url", "", "target base `URL` (with --label; or use --target)")
		label      = fs.String("label", "", "report `label` for --url, e.g. the routing policy")
		seed       = fs.Int64("seed", 0, "override the config's seed when not 0")
		outDir     = fs.String("out", "replay-out", "output `directory`")
		baseline   = fs.String("baseline", "", "label the comparison is relative to (default: the first target)")
		quiet      = fs.Bool("quiet", false, "no progress lines on stderr")
		salt       = fs.Bool("salt", false, "send cache_salt=LABEL, so targets sharing workers do not share cached prefixes")
	)
	fs.Var(&tgts, "target", "`LABEL=URL` to replay against; repeat to compare several")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var errs []error
	if *configPath == "" {
		errs = append(errs, errors.New("--config is required"))
	}
	if *url != "" {
		if err := tgts.Set(*label + "=" + *url); err != nil {
			errs = append(errs, fmt.Errorf("--url and --label: %w", err))
		}
	}
	if len(tgts) == 0 {
		errs = append(errs, errors.New("give --target LABEL=URL or --url with --label"))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	if *seed != 0 {
		cfg.Seed = *seed
	}
	if *baseline == "" {
		*baseline = tgts[0].label
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	opts := []replay.Option{replay.WithLogger(slog.New(slog.NewTextHandler(stderr, nil)))}
	if !*quiet {
		opts = append(opts, replay.WithProgress(stderr))
	}
	reports := map[string]*replay.Report{}
	var runErr error
	for _, t := range tgts {
		c := cfg
		c.Label, c.BaseURL = t.label, t.url
		if *salt {
			c.Workload.CacheSalt = t.label
		}
		rep, err := replay.Run(ctx, c, opts...)
		if rep != nil {
			reports[t.label] = rep
			path := filepath.Join(*outDir, safeName(t.label)+".json")
			if werr := writeFile(path, func(w io.Writer) error { return replay.WriteJSON(w, rep) }); werr != nil {
				return werr
			}
			fmt.Fprintln(stdout, "wrote", path)
		}
		if err != nil {
			runErr = fmt.Errorf("target %s: %w", t.label, err)
			break
		}
	}
	if len(reports) > 0 {
		if _, ok := reports[*baseline]; !ok {
			*baseline = ""
		}
		if err := writeComparison(reports, *baseline, *outDir, stdout); err != nil {
			return err
		}
	}
	if errors.Is(runErr, context.Canceled) {
		fmt.Fprintln(stderr, "replay: interrupted; partial reports written")
		return nil
	}
	return runErr
}

func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outDir := fs.String("out", "replay-out", "output `directory`")
	baseline := fs.String("baseline", "", "label the comparison is relative to")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("compare: give one or more report files")
	}
	reports := map[string]*replay.Report{}
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		rep, err := replay.ReadJSON(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("compare %s: %w", path, err)
		}
		if _, dup := reports[rep.Label]; dup {
			return fmt.Errorf("compare: label %q appears in two reports", rep.Label)
		}
		reports[rep.Label] = rep
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	return writeComparison(reports, *baseline, *outDir, stdout)
}

// writeComparison writes comparison.md and the plots and prints the table.
func writeComparison(reports map[string]*replay.Report, baseline, outDir string, stdout io.Writer) error {
	cmp, err := replay.Compare(reports, baseline)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := replay.WriteMarkdown(&md, cmp); err != nil {
		return err
	}
	path := filepath.Join(outDir, "comparison.md")
	if err := os.WriteFile(path, md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	plots, err := replay.WritePlots(outDir, cmp)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%s\nwrote %s\n", md.String(), path)
	for _, p := range plots {
		fmt.Fprintln(stdout, "wrote", p)
	}
	return nil
}

// loadConfig reads a YAML (or JSON) config strictly: unknown fields are
// errors.
func loadConfig(path string) (replay.Config, error) {
	var cfg replay.Config
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("decode config %s: %w", path, err)
	}
	// Validate what can be checked before targets are known.
	probe := cfg
	probe.SetDefaults()
	probe.Label, probe.BaseURL = "probe", "http://probe"
	if err := probe.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// safeName turns a label into a file name.
func safeName(label string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, label)
}
