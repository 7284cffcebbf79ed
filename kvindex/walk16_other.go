//go:build !amd64 || purego

package kvindex

// walkKernel reports that this machine has no walk16 kernel (walk16.go):
// walk takes walkChunks.
func (w *chainWalk) walkKernel(runs []uint32) (blocks int, _ []uint32, ok bool) {
	return 0, runs, false
}
