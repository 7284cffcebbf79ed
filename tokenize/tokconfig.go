package tokenize

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// ErrNoChatTemplate is returned when a model directory has no chat template.
var ErrNoChatTemplate = errors.New("no chat template")

// tokenizerConfig is what chat rendering needs from tokenizer_config.json.
type tokenizerConfig struct {
	// templates maps a template name to its source; a single unnamed
	// template is stored as "default".
	templates map[string]string
	// special holds the special-token variables transformers passes to the
	// template (bos_token, eos_token, ... and extra_special_tokens).
	special *jinja.Dict
}

// readTokenizerConfig reads dir/tokenizer_config.json and, when present,
// dir/chat_template.jinja, which takes precedence over the config's
// chat_template as it does in transformers.
func readTokenizerConfig(dir string) (*tokenizerConfig, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, fmt.Errorf("read tokenizer config: %w", err)
	}
	return parseTokenizerConfig(raw, dir)
}

func parseTokenizerConfig(raw []byte, dir string) (*tokenizerConfig, error) {
	v, err := jinja.ParseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("parse tokenizer config: %w", err)
	}
	root, ok := v.(*jinja.Dict)
	if !ok {
		return nil, fmt.Errorf("parse tokenizer config: top level is not an object")
	}
	cfg := &tokenizerConfig{templates: map[string]string{}, special: jinja.NewDict(8)}
	// The attributes transformers exposes as template variables through
	// special_tokens_map.
	for _, k := range [...]string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		tok, err := tokenContent(root, k)
		if err != nil {
			return nil, err
		}
		if tok != "" {
			cfg.special.Set(k, tok)
		}
	}
	if extra, ok := root.Get("extra_special_tokens"); ok {
		if ed, ok := extra.(*jinja.Dict); ok {
			for _, k := range ed.Keys() {
				tok, err := tokenContent(ed, k)
				if err != nil {
					return nil, err
				}
				if tok != "" {
					cfg.special.Set(k, tok)
				}
			}
		}
	}
	if ct, ok := root.Get("chat_template"); ok {
		switch t := ct.(type) {
		case string:
			cfg.templates["default"] = t
		case *jinja.List:
			for i, it := range t.Items {
				d, ok := it.(*jinja.Dict)
				if !ok {
					return nil, fmt.Errorf("parse tokenizer config: chat_template[%d] is not an object", i)
				}
				name, _ := d.Get("name")
				src, _ := d.Get("template")
				ns, ok1 := name.(string)
				ss, ok2 := src.(string)
				if !ok1 || !ok2 {
					return nil, fmt.Errorf("parse tokenizer config: chat_template[%d] needs string name and template", i)
				}
				cfg.templates[ns] = ss
			}
		case nil:
		default:
			return nil, fmt.Errorf("parse tokenizer config: chat_template must be a string or a list")
		}
	}
	if dir != "" {
		src, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
		switch {
		case err == nil:
			cfg.templates["default"] = string(src)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("read chat_template.jinja: %w", err)
		}
	}
	return cfg, nil
}

// tokenContent reads a special token given as a string or as an AddedToken
// object ({"content": ..., "__type": "AddedToken"}); absent and null give "".
func tokenContent(d *jinja.Dict, key string) (string, error) {
	v, ok := d.Get(key)
	if !ok || v == nil {
		return "", nil
	}
	switch t := v.(type) {
	case string:
		return t, nil
	case *jinja.Dict:
		c, _ := t.Get("content")
		s, ok := c.(string)
		if !ok {
			return "", fmt.Errorf("parse tokenizer config: %s has no string content", key)
		}
		return s, nil
	}
	return "", fmt.Errorf("parse tokenizer config: %s must be a string or an AddedToken object", key)
}
