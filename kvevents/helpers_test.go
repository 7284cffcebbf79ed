package kvevents

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
)

// testBlock is the block size of the tests' events, vLLM's default.
const testBlock = 16

// capturePath is the real vLLM 0.31 capture (testdata/README.md).
const capturePath = "testdata/vllm031-capture-excerpt.jsonl"

// newIndex returns kvindex.New(opts...), failing tb if it fails.
func newIndex(tb testing.TB, reg prometheus.Registerer, set ...func(*kvindex.Config)) *kvindex.Index {
	tb.Helper()
	cfg := kvindex.DefaultConfig()
	for _, f := range set {
		f(&cfg)
	}
	ix, err := kvindex.New(cfg, component.Options{Registerer: reg})
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}

// newSubscribers returns NewSubscribers(ix, cfg, o), failing tb if it fails.
func newSubscribers(tb testing.TB, ix *kvindex.Index, cfg Config, o component.Options) *Subscribers {
	tb.Helper()
	s, err := NewSubscribers(ix, cfg, o)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// feed converts wire events as a stream does and applies them to ix.
func feed(tb testing.TB, ix *kvindex.Index, src kvindex.Source, evs ...Event) {
	tb.Helper()
	m, err := newMetrics(component.Options{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var c converter
	ix.Apply(src, c.convert(&Batch{Events: evs}, m))
}

// cachedOn returns worker's GPU and offloaded tokens among ms.
func cachedOn(ms []kvindex.Match, worker string) (gpu, off int) {
	for _, m := range ms {
		if m.Worker == worker {
			return m.GPUTokens, m.OffloadedTokens
		}
	}
	return 0, 0
}

// captured is one message of a capture file.
type captured struct {
	Topic   string `json:"topic"`
	Seq     uint64 `json:"seq"`
	Payload []byte `json:"payload_b64"`
}

// loadCapture reads a capture file of {"topic","seq","payload_b64"} lines.
func loadCapture(t testing.TB, path string) []captured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []captured
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c captured
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// enc is a minimal msgpack writer for building test payloads.
type enc struct{ b []byte }

func (e *enc) arr(n int) *enc {
	switch {
	case n < 16:
		e.b = append(e.b, 0x90|byte(n))
	case n < 1<<16:
		e.b = append(e.b, 0xdc, byte(n>>8), byte(n))
	default:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xdd), uint32(n))
	}
	return e
}

func (e *enc) mp(n int) *enc {
	if n < 16 {
		e.b = append(e.b, 0x80|byte(n))
	} else {
		e.b = append(e.b, 0xde, byte(n>>8), byte(n))
	}
	return e
}

func (e *enc) str(s string) *enc {
	switch {
	case len(s) < 32:
		e.b = append(e.b, 0xa0|byte(len(s)))
	case len(s) < 256:
		e.b = append(e.b, 0xd9, byte(len(s)))
	default:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xda), uint16(len(s)))
	}
	e.b = append(e.b, s...)
	return e
}

func (e *enc) bin(p []byte) *enc {
	e.b = append(e.b, 0xc4, byte(len(p)))
	e.b = append(e.b, p...)
	return e
}

func (e *enc) nil() *enc { e.b = append(e.b, 0xc0); return e }

func (e *enc) uint(u uint64) *enc {
	switch {
	case u < 128:
		e.b = append(e.b, byte(u))
	case u < 1<<8:
		e.b = append(e.b, 0xcc, byte(u))
	case u < 1<<16:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xcd), uint16(u))
	case u < 1<<32:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xce), uint32(u))
	default:
		e.b = binary.BigEndian.AppendUint64(append(e.b, 0xcf), u)
	}
	return e
}

func (e *enc) int(i int64) *enc {
	if i >= 0 {
		return e.uint(uint64(i))
	}
	if i >= -32 {
		e.b = append(e.b, byte(i))
		return e
	}
	e.b = binary.BigEndian.AppendUint64(append(e.b, 0xd3), uint64(i))
	return e
}

func (e *enc) f64(f float64) *enc {
	e.b = binary.BigEndian.AppendUint64(append(e.b, 0xcb), math.Float64bits(f))
	return e
}

// stored describes a BlockStored for test payloads.
type stored struct {
	hashes    []uint64
	parent    *uint64
	tokens    []uint32
	blockSize int
	medium    string // "" writes nil
}

// storedArray writes a v0.11-style array-era BlockStored.
func (e *enc) storedArray(s stored) *enc {
	e.arr(7).str("BlockStored").arr(len(s.hashes))
	for _, h := range s.hashes {
		e.uint(h)
	}
	if s.parent == nil {
		e.nil()
	} else {
		e.uint(*s.parent)
	}
	e.arr(len(s.tokens))
	for _, t := range s.tokens {
		e.uint(uint64(t))
	}
	e.uint(uint64(s.blockSize)).nil()
	if s.medium == "" {
		return e.nil()
	}
	return e.str(s.medium)
}

// removedArray writes a v0.11-style array-era BlockRemoved.
func (e *enc) removedArray(hashes ...uint64) *enc {
	e.arr(3).str("BlockRemoved").arr(len(hashes))
	for _, h := range hashes {
		e.uint(h)
	}
	return e.str("GPU")
}

// batch wraps events (already encoded by fn) in a 3-element envelope.
func batch(n int, fn func(e *enc)) []byte {
	e := &enc{}
	e.arr(3).f64(1750000000.5).arr(n)
	fn(e)
	e.uint(0)
	return e.b
}

// randTokens returns n token ids drawn from rng, in a 150K vocabulary.
func randTokens(rng *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(rng.IntN(150000))
	}
	return out
}

func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}
