// Package app holds warmpath's configuration and its Main: the command
// line, and the wiring of the ext_proc server, admin API, discovery, KV
// event subscribers and scoring under one errgroup. It holds no business
// logic.
package app
