package vllmsim

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// KVEventsConfig is vLLM's --kv-events-config JSON object.
type KVEventsConfig struct {
	// EnableKVCacheEvents makes the engine publish KV-cache events.
	EnableKVCacheEvents bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null"; empty means "zmq" when enabled, as in
	// recent vLLM.
	Publisher string `json:"publisher"`
	// Endpoint is the PUB endpoint, default "tcp://*:5557". Endpoints with
	// "*" or "::", or ipc:// and inproc://, are bound; others are connected
	// to (vLLM's centralised mode).
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the ROUTER replay endpoint (always bound), "" for none.
	ReplayEndpoint string `json:"replay_endpoint"`
	// BufferSteps is the number of batches kept for replay, default 10000.
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB socket's send high-water mark, default 100000.
	HWM int `json:"hwm"`
	// MaxQueueSize bounds the queue between engine and publisher, default
	// 100000; when full the engine blocks, as in vLLM.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is frame 0 of every message.
	Topic string `json:"topic"`
}

// ParseKVEventsConfig decodes vLLM's JSON, rejecting unknown fields, and
// fills vLLM's defaults.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{}
	if strings.TrimSpace(s) != "" {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("kv-events-config: %w", err)
		}
	}
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.EnableKVCacheEvents {
			c.Publisher = "zmq"
		}
	}
	if c.Endpoint == "" {
		c.Endpoint = "tcp://*:5557"
	}
	if c.BufferSteps == 0 {
		c.BufferSteps = 10000
	}
	if c.HWM == 0 {
		c.HWM = 100000
	}
	if c.MaxQueueSize == 0 {
		c.MaxQueueSize = 100000
	}
	switch {
	case c.Publisher != "zmq" && c.Publisher != "null":
		return c, fmt.Errorf("kv-events-config: publisher %q: want zmq or null", c.Publisher)
	case c.BufferSteps < 0 || c.HWM < 0 || c.MaxQueueSize < 0:
		return c, errors.New("kv-events-config: buffer_steps, hwm and max_queue_size must not be negative")
	}
	return c, nil
}

// Enabled reports whether events are published over ZeroMQ.
func (c KVEventsConfig) Enabled() bool { return c.EnableKVCacheEvents && c.Publisher == "zmq" }

// rankEndpoint returns endpoint as data-parallel rank r uses it: tcp port
// + r (port 0 or * stays: the OS chooses each rank's), inproc://X becomes X_dp<r>.
func rankEndpoint(endpoint string, r int) (string, error) {
	if r == 0 || endpoint == "" {
		return endpoint, nil
	}
	if rest, ok := strings.CutPrefix(endpoint, "inproc://"); ok {
		return fmt.Sprintf("inproc://%s_dp%d", rest, r), nil
	}
	if !strings.HasPrefix(endpoint, "tcp://") {
		return endpoint, nil
	}
	if strings.HasSuffix(endpoint, ":*") {
		return endpoint, nil // every rank binds an ephemeral port of its own
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", fmt.Errorf("endpoint %q: port: %w", endpoint, err)
	}
	if port == 0 {
		return endpoint, nil
	}
	i := strings.LastIndex(endpoint, ":")
	return endpoint[:i+1] + strconv.Itoa(port+r), nil
}

// binds reports whether vLLM binds (rather than connects) endpoint.
func binds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// replayEnd is the sequence number that marks the end of a replay.
const replayEnd = ^uint64(0)

// ErrBadReplayRequest is returned for a replay request that is not
// [identity, "", 8-byte start sequence], which vLLM logs and ignores.
var ErrBadReplayRequest = errors.New("invalid replay request")

// parseReplayRequest returns the start sequence of a ROUTER replay request.
func parseReplayRequest(frames [][]byte) (identity []byte, start uint64, err error) {
	if len(frames) != 3 || len(frames[1]) != 0 || len(frames[2]) != 8 {
		return nil, 0, fmt.Errorf("%w: %d frames", ErrBadReplayRequest, len(frames))
	}
	return frames[0], binary.BigEndian.Uint64(frames[2]), nil
}

// replayRing keeps the last n published batches for replay.
type replayRing struct {
	n     int
	items []ringItem
	head  int // index of the oldest item once full
}

type ringItem struct {
	seq     uint64
	payload []byte
}

func (r *replayRing) add(seq uint64, payload []byte) {
	if r.n <= 0 {
		return
	}
	if len(r.items) < r.n {
		r.items = append(r.items, ringItem{seq, payload})
		return
	}
	r.items[r.head] = ringItem{seq, payload}
	r.head = (r.head + 1) % r.n
}

// from returns the retained batches with seq >= start, oldest first. When
// start is older than the oldest retained batch, replay starts at the
// oldest, as vLLM's does.
func (r *replayRing) from(start uint64) []ringItem {
	var out []ringItem
	for i := range r.items {
		it := r.items[(r.head+i)%len(r.items)]
		if it.seq >= start {
			out = append(out, it)
		}
	}
	return out
}

func (r *replayRing) reset() { r.items, r.head = r.items[:0], 0 }

// replayFrames returns the frames vLLM's ROUTER sends for one replayed
// batch (identity first); withTopic selects the layout after vLLM PR #45177.
func replayFrames(identity []byte, topic string, withTopic bool, seq uint64, payload []byte) [][]byte {
	seq8 := binary.BigEndian.AppendUint64(nil, seq)
	if withTopic {
		return [][]byte{identity, {}, []byte(topic), seq8, payload}
	}
	return [][]byte{identity, {}, seq8, payload}
}

// replayEndFrames returns the end-of-replay marker.
func replayEndFrames(identity []byte, withTopic bool) [][]byte {
	end := binary.BigEndian.AppendUint64(nil, replayEnd)
	if withTopic {
		return [][]byte{identity, {}, {}, end, {}}
	}
	return [][]byte{identity, {}, end, {}}
}
