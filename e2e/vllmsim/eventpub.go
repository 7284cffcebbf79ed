package vllmsim

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/zeromq/goczmq"
)

// EventPublisher is a bare KV-event publisher for tools that decide the
// events themselves instead of running an engine (load drivers): a ZeroMQ
// PUB socket bound on loopback, as vLLM binds it, that sends each payload
// (AppendBatch's) with vLLM's three frames — topic, a big-endian sequence
// number counting from 0, payload. It serves no replay.
type EventPublisher struct {
	sock     *goczmq.Sock
	topic    []byte
	endpoint string
	queue    chan []byte
}

// NewEventPublisher binds a publisher on a free loopback port.
func NewEventPublisher(topic string) (*EventPublisher, error) {
	s := goczmq.NewSock(goczmq.Pub)
	if _, err := s.Bind("tcp://127.0.0.1:*"); err != nil {
		s.Destroy()
		return nil, fmt.Errorf("bind kv events: %w", err)
	}
	return &EventPublisher{sock: s, topic: []byte(topic), endpoint: s.LastEndpoint(), queue: make(chan []byte, 4096)}, nil
}

// Endpoint is the address subscribers connect to.
func (p *EventPublisher) Endpoint() string { return p.endpoint }

// Publish queues a payload, blocking while 4,096 are queued.
func (p *EventPublisher) Publish(payload []byte) { p.queue <- payload }

// Run sends queued payloads in order until ctx ends, then closes the
// socket. It holds one OS thread: a ZeroMQ socket is not safe for
// concurrent use.
func (p *EventPublisher) Run(ctx context.Context) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer p.sock.Destroy()
	var seq uint64
	var seq8 [8]byte
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-p.queue:
			binary.BigEndian.PutUint64(seq8[:], seq)
			seq++
			_ = p.sock.SendMessage([][]byte{p.topic, seq8[:], b})
		}
	}
}
