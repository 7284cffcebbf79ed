// Package discovery owns the worker set: which vLLM servers exist, how to
// reach their HTTP, KV-event and replay endpoints, how loaded they are, and
// whether they are fit to receive requests.
//
// # Sources and the pool
//
// A Source (Static for the configuration file, Kubernetes for pods
// selected by label or by a Gateway API Inference Extension InferencePool)
// publishes complete worker sets into a one-slot Updates mailbox: the first
// set once it knows the whole set, then one after every change. Publishing
// never blocks and bursts coalesce, so a slow consumer never holds a source
// up. A Pool runs one Source and swaps each set in whole through an atomic
// pointer; Candidates, Models and Workers read it without locking, and
// Watch lets the KV index follow membership changes.
//
// # Health
//
// The response path reports every upstream result with Pool.ReportResult.
// Connection failures eject a worker at once and consecutive 5xx answers
// after a threshold; ejections back off exponentially up to a cap. An
// active GET /health check runs on an interval, and at once after any
// reported failure that did not eject: behind Envoy a refused connection
// arrives as a plain 503 local reply, and the check's refused dial then
// ejects the dead worker after that one request. Ejected and failing workers
// are left out of Candidates but stay in the set (and in the index) until
// their source removes them. Pool.Ready is true once at least one worker
// can take requests.
//
// # Engine metrics and guardrails
//
// A Scraper reads every worker's /metrics (vLLM's Prometheus exposition)
// each interval and keeps an EngineLoad per worker: running and waiting
// requests, KV-cache usage, prefix-cache counters, preemptions, LoRA state
// and the cache configuration. A load older than the configured age is
// Stale, which is not the same as idle. A Guard compares each engine's
// cache configuration with warmpath's configured block sizes and with the
// block size seen in KV events, logs disagreements, counts them in a gauge
// and shows them in the Status debug view.
//
// # Kubernetes annotations
//
// Per-pod settings default to KubeConfig.Defaults and are overridden by
// these pod annotations:
//
//	warmpath.io/http-port           HTTP port of the vLLM server (default 8000)
//	warmpath.io/kv-events-port      ZMQ PUB port of rank 0; "0" turns events off
//	warmpath.io/kv-replay-port      ZMQ ROUTER replay port of rank 0; "0" turns replay off
//	warmpath.io/data-parallel-size  data-parallel ranks behind the HTTP port
//	warmpath.io/models              comma-separated served model names
//
// A pod with a malformed annotation is left out, logged once and counted in
// warmpath_discovery_pods_skipped_total.
//
// # Wiring
//
// Every long-running part has a Run(ctx) error method for the
// application's errgroup:
//
//	pool, _ := discovery.NewPool(src, discovery.HealthConfig{}, discovery.WithLogger(log), discovery.WithRegisterer(reg))
//	scraper, _ := discovery.NewScraper(pool, discovery.ScrapeConfig{}, ...)
//	guard, _ := discovery.NewGuard(pool, scraper, discovery.GuardConfig{
//		BlockSize:      cfg.BlockSizeOf,     // per model, from the configuration
//		EventBlockSize: index.BlockSizeSeen, // from the KV index
//	}, ...)
//	g.Go(func() error { return pool.Run(ctx) })
//	g.Go(func() error { return scraper.Run(ctx) })
//	g.Go(func() error { return guard.Run(ctx) })
//
// Pool satisfies extproc's Pool and HealthReporter; Pool.Watch feeds
// kvevents' Subscribers.Update; Scraper.Load feeds scoring's EngineLoad
// through a small adapter in the application (discovery cannot import
// scoring, which imports it).
package discovery
