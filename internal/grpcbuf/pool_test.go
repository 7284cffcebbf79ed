package grpcbuf

import (
	"testing"

	"google.golang.org/grpc/mem"
)

var _ mem.BufferPool = (*Pool)(nil)

func TestGetLengthAndTier(t *testing.T) {
	var p Pool
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 16<<10 + 9, 64<<10 + 20, 1 << 22} {
		b := p.Get(n)
		if len(*b) != n {
			t.Errorf("Get(%d): len %d", n, len(*b))
		}
		if c := cap(*b); c < n || c > 2*max(n, 256) {
			t.Errorf("Get(%d): cap %d, want between %d and %d", n, c, n, 2*max(n, 256))
		}
		p.Put(b)
	}
}

func TestReuseWithinTier(t *testing.T) {
	var p Pool
	b := p.Get(70 << 10)
	(*b)[0] = 42
	p.Put(b)
	// sync.Pool may drop what it holds at any GC; retry a few times so the
	// test checks reuse rather than the collector's timing.
	for range 10 {
		c := p.Get(65 << 10)
		if cap(*c) == cap(*b) && &(*c)[:1][0] == &(*b)[:1][0] {
			if len(*c) != 65<<10 {
				t.Fatalf("reused buffer has len %d, want %d", len(*c), 65<<10)
			}
			return
		}
		p.Put(b)
	}
	t.Skip("sync.Pool dropped the buffer every time")
}

func TestLargeNotPooled(t *testing.T) {
	var p Pool
	b := p.Get(1<<22 + 1)
	if len(*b) != 1<<22+1 {
		t.Fatalf("len %d", len(*b))
	}
	p.Put(b) // must not panic nor enter a tier
	for i := range p.tiers {
		if v := p.tiers[i].Get(); v != nil {
			t.Fatalf("tier %d holds a buffer after Put of an unpooled one", i)
		}
	}
}

func TestForeignCapacityDropped(t *testing.T) {
	var p Pool
	b := make([]byte, 300)
	p.Put(&b)
	if v := p.tiers[tier(300)].Get(); v != nil {
		t.Fatal("a buffer whose capacity is no tier's was pooled")
	}
}

func BenchmarkGetPut64K(b *testing.B) {
	var p Pool
	for b.Loop() {
		p.Put(p.Get(64<<10 + 20))
	}
}

func BenchmarkGetPut64KDefault(b *testing.B) {
	p := mem.DefaultBufferPool()
	for b.Loop() {
		p.Put(p.Get(64<<10 + 20))
	}
}
