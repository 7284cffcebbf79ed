// Package clocktest provides a settable clock for tests, so that a test
// decides when time passes instead of sleeping.
//
// A Clock's Now method has the signature of time.Now, so it goes wherever
// a constructor takes a clock function:
//
//	clk := clocktest.New(time.Unix(1000, 0))
//	ix, err := kvindex.New(cfg, component.Options{Clock: clk.Now})
//	...
//	clk.Advance(time.Minute) // entries older than a minute are now stale
//
// It also satisfies interfaces that wait as well as tell time, such as the
// replayer's Clock (Now and SleepUntil): a sleep returns at once, with the
// clock moved to the wake-up time.
//
// The package is for tests only: _test.go files and the end-to-end tree
// (e2e/) may import it, production packages may not, which
// internal/layering checks.
package clocktest
