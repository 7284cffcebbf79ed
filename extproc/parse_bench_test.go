package extproc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/scoring"
)

// BenchmarkParseBody parses a 100K-token-sized chat (about 700 KB of
// messages) as a request's body is parsed before its decision: the figure
// to read is B/op, what one such request allocates here.
func BenchmarkParseBody(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","stream":true,"max_tokens":256,"messages":[`)
	for i := range 200 {
		if i > 0 {
			sb.WriteByte(',')
		}
		role := [2]string{"user", "assistant"}[i%2]
		fmt.Fprintf(&sb, `{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("turn %d says something long. ", i), 120))
	}
	sb.WriteString(`]}`)
	raw := []byte(sb.String())
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		var r scoring.Request
		r.API = scoring.APIChat
		if _, err := parseBody(&r, raw, "", nil); err != nil {
			b.Fatal(err)
		}
	}
}
