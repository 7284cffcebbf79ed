// Package grpcbuf holds the gRPC server's message buffers: a pool that
// does not clear what it hands out, and a proto codec that uses it.
//
// grpc-go's default pool clears every buffer it hands out, up to the whole
// capacity of its tier, and its proto codec marshals and unmarshals through
// that pool. warmpath sends a request's body back to Envoy in 64 KiB
// chunks, each of which lands in the default pool's 1 MiB tier, so a 600 KB
// body cost 10 MB of clearing on the way out alone. Clearing buys nothing
// here: a buffer is marshaled into from its start, or filled by a read, up
// to the length asked for, which is what grpc-go's own transport and ALTS
// pools rely on too.
package grpcbuf

import (
	"math/bits"
	"sync"
)

const (
	minShift = 8  // the smallest tier, 256 bytes
	maxShift = 22 // the largest tier, 4 MiB; larger buffers are not pooled
)

// Pool is a set of sync.Pools, one per power of two from 256 bytes to 4 MiB,
// so a buffer is at most twice the size asked for. It implements
// google.golang.org/grpc/mem.BufferPool. The zero value is ready to use.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

// tier is the index of the smallest tier holding n bytes, or -1 when n is
// larger than every tier.
func tier(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	s := bits.Len(uint(n - 1))
	if s > maxShift {
		return -1
	}
	return s - minShift
}

// Get returns a buffer of length n. Its bytes hold whatever the buffer held
// before: the caller overwrites them.
func (p *Pool) Get(n int) *[]byte {
	t := tier(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.tiers[t].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<(t+minShift))
	return &b
}

// Put returns a buffer from Get to the pool. Buffers whose capacity is not
// exactly a tier's (the unpooled large ones) are left to the collector.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	t := tier(c)
	if t < 0 || c != 1<<(t+minShift) {
		return
	}
	p.tiers[t].Put(b)
}
