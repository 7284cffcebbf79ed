package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/warmpath/warmpath/kvevents"
)

// kvEventsUsage is printed for a missing or unknown subcommand.
const kvEventsUsage = `usage:
  warmpath kvevents tail --endpoint tcp://HOST:PORT [--replay tcp://HOST:PORT] [--topic T]
  warmpath kvevents decode [FILE]   (capture lines {"topic","seq","payload_b64"}; stdin without FILE)
Both print one JSON line per message.`

// runKVEvents implements "warmpath kvevents": tail subscribes to a vLLM
// KV-event publisher (replaying its buffer first when --replay is given)
// and decode reads a capture file; both print decoded messages as JSON
// lines on stdout until ctx ends or the input does. A message that does not
// decode is printed with an "error" field; decode then fails at the end.
func runKVEvents(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, kvEventsUsage)
		return errors.New("kvevents: missing subcommand")
	}
	switch args[0] {
	case "tail":
		return kvEventsTail(ctx, args[1:], stdout, stderr)
	case "decode":
		return kvEventsDecode(ctx, args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintln(stderr, kvEventsUsage)
	return fmt.Errorf("kvevents: unknown subcommand %q", args[0])
}

func kvEventsTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvevents tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "ZMQ PUB endpoint of the engine, tcp://HOST:PORT")
	replay := fs.String("replay", "", "ZMQ ROUTER replay endpoint; replays the engine's buffer first")
	topic := fs.String("topic", "", "topic prefix to subscribe to (default: all)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kvevents tail: %w", err)
	}
	if *endpoint == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("kvevents tail: --endpoint is required and takes no arguments")
	}
	p := newKVPrinter(stdout)
	err := kvevents.Tail(ctx, *endpoint, *replay, *topic, func(m kvevents.Message) error {
		return p.print(m)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("kvevents tail: %w", err)
	}
	return nil
}

// captureLine is one line of a capture file.
type captureLine struct {
	Topic   string `json:"topic"`
	Seq     uint64 `json:"seq"`
	Payload []byte `json:"payload_b64"`
}

func kvEventsDecode(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 1 {
		fmt.Fprintln(stderr, kvEventsUsage)
		return errors.New("kvevents decode: at most one FILE")
	}
	in := stdin
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return fmt.Errorf("kvevents decode: %w", err)
		}
		defer f.Close()
		in = f
	}
	p := newKVPrinter(stdout)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	line := 0
	for sc.Scan() && ctx.Err() == nil {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var c captureLine
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("kvevents decode: line %d: %w", line, err)
		}
		if err := p.print(kvevents.Message{Topic: c.Topic, Seq: c.Seq, Payload: c.Payload}); err != nil {
			return fmt.Errorf("kvevents decode: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("kvevents decode: %w", err)
	}
	if p.failed > 0 {
		return fmt.Errorf("kvevents decode: %d of %d messages did not decode", p.failed, p.total)
	}
	return nil
}

// kvPrinter decodes messages and writes them as JSON lines.
type kvPrinter struct {
	enc    *json.Encoder
	dec    kvevents.Decoder
	b      kvevents.Batch
	total  int
	failed int
}

func newKVPrinter(w io.Writer) *kvPrinter {
	return &kvPrinter{enc: json.NewEncoder(w)}
}

// kvMessageJSON is the printed form of one message.
type kvMessageJSON struct {
	Topic         string        `json:"topic"`
	Seq           uint64        `json:"seq"`
	Replayed      bool          `json:"replayed,omitempty"`
	TS            float64       `json:"ts,omitempty"`
	DPRank        *int          `json:"data_parallel_rank,omitempty"`
	Events        []kvEventJSON `json:"events"`
	UnknownEvents int           `json:"unknown_events,omitempty"`
	UnknownFields int           `json:"unknown_fields,omitempty"`
	Error         string        `json:"error,omitempty"`
}

// kvEventJSON uses vLLM's field names; absent optional fields are omitted.
type kvEventJSON struct {
	Type            string   `json:"type"`
	BlockHashes     []uint64 `json:"block_hashes,omitempty"`
	ParentBlockHash *uint64  `json:"parent_block_hash,omitempty"`
	TokenIDs        []uint32 `json:"token_ids,omitempty"`
	BlockSize       int      `json:"block_size,omitempty"`
	LoRAID          *int64   `json:"lora_id,omitempty"`
	Medium          string   `json:"medium,omitempty"`
	LoRAName        string   `json:"lora_name,omitempty"`
	ExtraKeys       []any    `json:"extra_keys,omitempty"`
	GroupIdx        int      `json:"group_idx,omitempty"`
	SpecKind        string   `json:"kv_cache_spec_kind,omitempty"`
	SlidingWindow   int      `json:"kv_cache_spec_sliding_window,omitempty"`
}

func (p *kvPrinter) print(m kvevents.Message) error {
	p.total++
	out := kvMessageJSON{Topic: m.Topic, Seq: m.Seq, Replayed: m.Replayed, Events: []kvEventJSON{}}
	if err := p.dec.Decode(m.Payload, &p.b); err != nil {
		p.failed++
		out.Error = err.Error()
		return p.enc.Encode(out)
	}
	out.TS, out.UnknownEvents, out.UnknownFields = p.b.TS, p.b.UnknownEvents, p.b.UnknownFields
	if p.b.HasDPRank {
		rank := p.b.DPRank
		out.DPRank = &rank
	}
	for _, ev := range p.b.Events {
		e := kvEventJSON{
			Type: ev.Kind.String(), BlockHashes: ev.BlockHashes, TokenIDs: ev.TokenIDs, BlockSize: ev.BlockSize,
			Medium: ev.Medium, LoRAName: ev.LoRAName, GroupIdx: ev.GroupIdx, SpecKind: ev.SpecKind,
			SlidingWindow: ev.SlidingWindow,
		}
		if ev.HasParent {
			parent := ev.ParentHash
			e.ParentBlockHash = &parent
		}
		if ev.HasLoRAID {
			id := ev.LoRAID
			e.LoRAID = &id
		}
		for _, raw := range ev.ExtraKeys {
			var v any
			if raw != nil {
				var err error
				if v, err = kvevents.DecodeValue(raw); err != nil {
					v = err.Error()
				}
			}
			e.ExtraKeys = append(e.ExtraKeys, v)
		}
		out.Events = append(out.Events, e)
	}
	return p.enc.Encode(out)
}
