package replay

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrTrace is wrapped by every error about a malformed trace record.
var ErrTrace = errors.New("malformed trace")

// maxTraceLine bounds one trace line (a Mooncake record with its hash ids).
const maxTraceLine = 16 << 20

// TraceRecord is one request of a public serving trace.
type TraceRecord struct {
	// Arrival is the offset from the trace's first request.
	Arrival time.Duration
	// InputTokens and OutputTokens are the prompt and output lengths.
	InputTokens  int
	OutputTokens int
	// HashIDs are Mooncake's prefix block ids: equal ids at equal positions
	// mean equal blocks of tokens. Nil for traces without prefix information.
	HashIDs []int64
}

// ParseMooncake reads a Mooncake JSONL trace: one object per line with
// "timestamp" (milliseconds), "input_length", "output_length" and
// "hash_ids". Blank lines are skipped. Errors name the line and wrap
// ErrTrace.
func ParseMooncake(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTraceLine)
	var out []TraceRecord
	var first float64
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec struct {
			Timestamp    *float64 `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength *int     `json:"output_length"`
			HashIDs      []int64  `json:"hash_ids"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrTrace, line, err)
		}
		if rec.Timestamp == nil || rec.InputLength == nil || rec.OutputLength == nil {
			return nil, fmt.Errorf("%w: line %d: timestamp, input_length and output_length are required", ErrTrace, line)
		}
		if *rec.InputLength <= 0 || *rec.OutputLength < 0 || *rec.Timestamp < 0 {
			return nil, fmt.Errorf("%w: line %d: negative or zero length or negative timestamp", ErrTrace, line)
		}
		if len(out) == 0 {
			first = *rec.Timestamp
		}
		ms := *rec.Timestamp - first
		if ms < 0 {
			return nil, fmt.Errorf("%w: line %d: timestamp %v before the first record", ErrTrace, line, *rec.Timestamp)
		}
		out = append(out, TraceRecord{
			Arrival:      time.Duration(ms * float64(time.Millisecond)),
			InputTokens:  *rec.InputLength,
			OutputTokens: *rec.OutputLength,
			HashIDs:      rec.HashIDs,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrace, err)
	}
	return out, nil
}

// azureTimeLayout is the timestamp format of the Azure 2023 traces
// ("2023-11-16 18:17:03.9799600").
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// ParseAzure reads an Azure LLM inference trace CSV (2023 format) with the
// header TIMESTAMP,ContextTokens,GeneratedTokens. Arrivals are relative to
// the first row; rows need not be sorted but must not precede the first.
func ParseAzure(r io.Reader) ([]TraceRecord, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrTrace, err)
	}
	if header[0] != "TIMESTAMP" || header[1] != "ContextTokens" || header[2] != "GeneratedTokens" {
		return nil, fmt.Errorf("%w: header %q, want TIMESTAMP,ContextTokens,GeneratedTokens", ErrTrace, header)
	}
	var out []TraceRecord
	var first time.Time
	for {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTrace, err)
		}
		line, _ := cr.FieldPos(0) // only valid after a successful Read

		ts, err := time.Parse(azureTimeLayout, row[0])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrTrace, line, err)
		}
		in, err1 := strconv.Atoi(row[1])
		outTok, err2 := strconv.Atoi(row[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrTrace, line, err)
		}
		if in <= 0 || outTok < 0 {
			return nil, fmt.Errorf("%w: line %d: ContextTokens must be > 0 and GeneratedTokens >= 0", ErrTrace, line)
		}
		if len(out) == 0 {
			first = ts
		}
		if ts.Before(first) {
			return nil, fmt.Errorf("%w: line %d: timestamp before the first row", ErrTrace, line)
		}
		out = append(out, TraceRecord{Arrival: ts.Sub(first), InputTokens: in, OutputTokens: outTok})
	}
	return out, nil
}

// traceSessions turns trace records into one-turn sessions. Each Mooncake
// hash id becomes a deterministic block of BlockTokens tokens (same id, same
// tokens) sent as the prefix, the last block cut to the input length; input
// beyond the hash ids, and whole prompts of traces without hash ids, are
// unique text.
func traceSessions(recs []TraceRecord, c TraceConfig, seed int64) []Session {
	if c.Limit > 0 && len(recs) > c.Limit {
		recs = recs[:c.Limit]
	}
	blocks := map[int64]Text{}
	block := func(id int64) Text {
		if t, ok := blocks[id]; ok {
			return t
		}
		t := genText(newRand(seed, hashString("block"), uint64(id)), c.BlockTokens)
		blocks[id] = t
		return t
	}
	out := make([]Session, len(recs))
	for i, rec := range recs {
		n := rec.InputTokens
		if c.MaxPrompt > 0 {
			n = min(n, c.MaxPrompt)
		}
		var prefix Text
		for _, id := range rec.HashIDs {
			if prefix.Len() >= n {
				break
			}
			prefix = concat(prefix, block(id).head(n-prefix.Len()))
		}
		s := Session{ID: fmt.Sprintf("t%d", i), Prefix: prefix, Arrival: rec.Arrival}
		if len(rec.HashIDs) > 0 {
			s.Group = fmt.Sprintf("h%d", rec.HashIDs[0])
		}
		outTok := max(rec.OutputTokens, 1)
		if c.MaxOutput > 0 {
			outTok = min(outTok, c.MaxOutput)
		}
		var user Text
		if rest := n - prefix.Len(); rest > 0 {
			user = userText(seed, i, "t", i, 0, rest)
		}
		s.Turns = []Turn{{User: user, MaxTokens: outTok}}
		out[i] = s
	}
	return out
}
