package scoring

import "context"

// picker is the interface the ext_proc layer calls; every picker in this
// package must satisfy it.
type picker interface {
	Pick(ctx context.Context, req *Request, ws Workers) (*Decision, error)
	Done(d *Decision, o Outcome)
}

var _ picker = (*Router)(nil)
