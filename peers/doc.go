// Package peers lets several warmpath replicas route in front of the same
// workers as one: each shares its in-flight ledger with the others, so a
// pick never herds onto a worker another replica just filled and no
// replica takes the others' load for a slow worker.
//
// There is no leader and no consensus. Every replica serves its own ledger
// on the ext_proc port (gRPC service warmpath.peers.v1.Peers, method
// Follow): a follower proves the shared token, gets a hello proving the
// replica knows it too, a snapshot of the replica's assignments in flight,
// then every change (reservation, first token, end) in batches flushed as
// they form, with heartbeats when idle. Every replica follows every peer it
// knows: the static list, the addresses of a DNS name (a Kubernetes
// headless Service), and the address each follower advertises, so two
// replicas that know one another's address only one way still follow both
// ways. A peer's changes go into the router's ledger (scoring.Router
// ApplyPeer) and its speculated blocks into the KV index. A replica that
// dies loses only its own entries: after expire_after without a frame the
// others drop them. Times travel relative to the moment a frame is sent,
// so replicas' clocks need not agree.
//
// A Mesh is the router's LedgerSink; Run owns its goroutines (the sender,
// one follower per peer address, DNS); Status and the warmpath_peer*
// series show peers, their freshness and the traffic.
package peers
