package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/warmpath/warmpath/tokenize"
)

// runTokenize implements "warmpath tokenize --tokenizer DIR [--chat]": each
// JSON line on stdin — {"text": "...", "add_special_tokens": true} or, with
// --chat, an OpenAI chat request body — becomes one line {"ids": [...]} on
// stdout (or {"error": "..."}), exactly the ids vLLM computes. Chat requests
// are rendered with the model's chat template and encoded without added
// special tokens, as vLLM does; text gets them unless the line says false.
func runTokenize(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("warmpath tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("tokenizer", "", "directory with tokenizer.json (or .json.gz) and tokenizer_config.json (required)")
	chat := fs.Bool("chat", false, "lines are OpenAI chat request bodies, rendered with the chat template")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: warmpath tokenize --tokenizer DIR [--chat] < requests.jsonl\n\n"+
			"Reads JSON lines ({\"text\": \"...\"} or, with --chat, chat requests) and prints {\"ids\": [...]} per line.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if *dir == "" {
		fs.Usage()
		return errUsage
	}
	tok, err := tokenize.Load(*dir)
	if err != nil {
		return err
	}
	var tmpl *tokenize.ChatTemplate
	if *chat {
		if tmpl, err = tokenize.LoadChatTemplate(*dir); err != nil {
			return err
		}
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	out := bufio.NewWriter(stdout)
	defer func() {
		if ferr := out.Flush(); ferr != nil && err == nil {
			err = fmt.Errorf("write stdout: %w", ferr)
		}
	}()
	enc := json.NewEncoder(out)
	failed := 0
	for line := 1; sc.Scan(); line++ {
		if ctx.Err() != nil {
			return nil
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		ids, err := tokenizeLine(tok, tmpl, sc.Bytes())
		if err != nil {
			failed++
			if err := enc.Encode(map[string]string{"error": fmt.Sprintf("line %d: %v", line, err)}); err != nil {
				return fmt.Errorf("write stdout: %w", err)
			}
			continue
		}
		if ids == nil {
			ids = []uint32{}
		}
		if err := enc.Encode(map[string][]uint32{"ids": ids}); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if failed > 0 {
		return fmt.Errorf("%d lines failed", failed)
	}
	return nil
}

func tokenizeLine(tok *tokenize.Tokenizer, tmpl *tokenize.ChatTemplate, b []byte) ([]uint32, error) {
	if tmpl != nil {
		text, err := tmpl.RenderOpenAI(b)
		if err != nil {
			return nil, err
		}
		return tok.Encode(text, false), nil
	}
	var in struct {
		Text             *string `json:"text"`
		AddSpecialTokens *bool   `json:"add_special_tokens"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	if in.Text == nil {
		return nil, errors.New(`want {"text": "..."}`)
	}
	return tok.Encode(*in.Text, in.AddSpecialTokens == nil || *in.AddSpecialTokens), nil
}
