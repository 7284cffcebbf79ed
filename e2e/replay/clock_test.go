package replay

import (
	"io"
	"time"

	"github.com/warmpath/warmpath/internal/clocktest"
)

// epoch is where the tests' clocks start. A *clocktest.Clock is a Clock:
// SleepUntil moves it to the wake-up time at once.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// timedReader returns one piece per Read, advancing the clock by the
// piece's delay first, as if the bytes had taken that long to arrive.
type timedReader struct {
	clock  *clocktest.Clock
	pieces []timedPiece
}

type timedPiece struct {
	delay time.Duration
	data  string
}

func (r *timedReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	piece := r.pieces[0]
	r.clock.Advance(piece.delay)
	n := copy(p, piece.data)
	if n < len(piece.data) {
		r.pieces[0] = timedPiece{data: piece.data[n:]}
	} else {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}
