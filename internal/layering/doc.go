// Package layering holds no code. Its test checks the dependency rules of
// warmpath's design (DESIGN.md §2) on the module as the go command sees
// it: the index, the scorer and the tokenizer build without cgo, only
// kvevents uses goczmq, and no production package imports the end-to-end
// test tree (e2e/) or the test clock (internal/clocktest).
package layering
