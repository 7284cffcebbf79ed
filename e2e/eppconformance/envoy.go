package eppconformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"text/template"

	"github.com/warmpath/warmpath/e2e/envoytest"
)

// The data plane: one real Envoy with a listener per way of calling the
// picker. Every listener runs the same chain: header_to_metadata turns the
// suite's subset headers into the protocol's subset hint
// (envoy.lb.subset_hint, as a trusted data plane would set it), ext_proc
// calls the picker (forwarding envoy.lb and envoy.lb.subset_hint, receiving
// envoy.lb), a second header_to_metadata reports the served endpoint
// (the route adds %UPSTREAM_REMOTE_ADDRESS% of the attempt that answered as
// a response header, which becomes envoy.lb/x-gateway-destination-endpoint-served
// before ext_proc sees the response headers), and the router. The upstream
// clusters hold the pool and the canary and route with Envoy's
// override_host load balancer, which walks an ip:port,ip:port list on
// retries; each reads one source only, so that each of the protocol's two
// paths (header, metadata) is tested on its own.
//
//	fdx       FULL_DUPLEX_STREAMED both ways (trailers SEND); destination from the header
//	main      the data plane's mode (DataPlane); destination from the header
//	meta      the data plane's mode; destination from envoy.lb metadata; retries 5xx and resets on the next endpoint
//	buffered  BUFFERED request, STREAMED response (trailers SKIP); destination from the header
//	h2c       the data plane's mode; HTTP/2 cleartext to the pool (InferencePool appProtocol kubernetes.io/h2c) and from the client; trailers
//	shed      as main, calling the shed picker (when one is given)

// DataPlane is the ext_proc processing mode of the main, meta, h2c and
// shed listeners.
type DataPlane string

// Data planes.
const (
	// FullDuplex is FULL_DUPLEX_STREAMED both ways with trailers SEND: the
	// streaming mode the protocol requires, and what Inference Extension
	// gateways generate. The default.
	FullDuplex DataPlane = "full-duplex"
	// StreamedEarlyBody is STREAMED both ways with
	// send_body_without_waiting_for_header_response and trailers SKIP: one
	// reply per body chunk, the request body sent before the header reply
	// is due. For pickers that cannot serve FULL_DUPLEX_STREAMED, to see
	// what of the rest of the protocol they implement.
	StreamedEarlyBody DataPlane = "streamed-early-body"
)

// Request headers the data plane turns into the subset hint.
const (
	hdrSubset     = "x-conformance-subset"      // comma string
	hdrSubsetList = "x-conformance-subset-list" // base64 of a serialized google.protobuf.Value
)

type hostPort struct {
	Host string
	Port string
}

var bootstrapTmpl = template.Must(template.New("envoy").Parse(`
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
static_resources:
  listeners:
{{- range $l := .Listeners}}
  - name: {{$l.Name}}
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    per_connection_buffer_limit_bytes: 1048576
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {{$l.Name}}
          codec_type: AUTO
          stream_idle_timeout: 60s
          request_timeout: 0s
          route_config:
            name: {{$l.Name}}
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: {{$l.Cluster}}
                  timeout: 0s
                  idle_timeout: 60s
{{- if $l.Retries}}
                  retry_policy:
                    retry_on: 5xx,reset,connect-failure,refused-stream
                    num_retries: 3
{{- end}}
                response_headers_to_add:
                - header: {key: x-conformance-upstream, value: "%UPSTREAM_REMOTE_ADDRESS%"}
          http_filters:
          - name: envoy.filters.http.header_to_metadata
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config
              request_rules:
              - header: ` + hdrSubset + `
                on_header_present: {metadata_namespace: envoy.lb.subset_hint, key: x-gateway-destination-endpoint-subset, type: STRING}
                remove: true
              - header: ` + hdrSubsetList + `
                on_header_present: {metadata_namespace: envoy.lb.subset_hint, key: x-gateway-destination-endpoint-subset, type: PROTOBUF_VALUE, encode: BASE64}
                remove: true
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: {cluster_name: {{$l.Picker}}}
              failure_mode_allow: false
{{- if $l.EarlyBody}}
              send_body_without_waiting_for_header_response: true
{{- end}}
              processing_mode:
                request_header_mode: SEND
                request_body_mode: {{$l.ReqMode}}
                request_trailer_mode: {{$l.Trailers}}
                response_header_mode: SEND
                response_body_mode: {{$l.RespMode}}
                response_trailer_mode: {{$l.Trailers}}
              message_timeout: 10s
              metadata_options:
                forwarding_namespaces: {untyped: ["envoy.lb", "envoy.lb.subset_hint"]}
                receiving_namespaces: {untyped: ["envoy.lb"]}
          - name: envoy.filters.http.header_to_metadata
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config
              response_rules:
              - header: x-conformance-upstream
                on_header_present: {metadata_namespace: envoy.lb, key: x-gateway-destination-endpoint-served, type: STRING}
                remove: true
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              suppress_envoy_headers: true
{{- end}}
  clusters:
{{- range $p := .Pickers}}
  - name: {{$p.Name}}
    type: STATIC
    connect_timeout: 2s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    circuit_breakers:
      thresholds: [{max_connections: 10000, max_pending_requests: 10000, max_requests: 10000}]
    load_assignment:
      cluster_name: {{$p.Name}}
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: "{{$p.Host}}", port_value: {{$p.Port}}}}}}]}]
{{- end}}
{{- range $c := .Clusters}}
  - name: {{$c.Name}}
    type: STATIC
    connect_timeout: 2s
{{- if $c.H2C}}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
{{- end}}
    circuit_breakers:
      thresholds: [{max_connections: 10000, max_pending_requests: 10000, max_requests: 10000}]
    load_balancing_policy:
      policies:
      - typed_extension_config:
          name: envoy.load_balancing_policies.override_host
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost
            override_host_sources:
{{- if $c.Metadata}}
            - metadata: {key: envoy.lb, path: [{key: x-gateway-destination-endpoint}]}
{{- else}}
            - header: x-gateway-destination-endpoint
{{- end}}
            fallback_policy:
              policies:
              - typed_extension_config:
                  name: envoy.load_balancing_policies.round_robin
                  typed_config: {"@type": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin}
    load_assignment:
      cluster_name: {{$c.Name}}
      endpoints:
      - lb_endpoints:
{{- range $h := $.Hosts}}
        - endpoint: {address: {socket_address: {address: "{{$h.Host}}", port_value: {{$h.Port}}}}}
{{- end}}
{{- end}}
`))

type listenerSpec struct {
	Name, Cluster, Picker       string
	ReqMode, RespMode, Trailers string
	Retries, EarlyBody          bool
}

type clusterSpec struct {
	Name          string
	H2C, Metadata bool
}

type pickerSpec struct {
	Name, Host, Port string
}

// bootstrap renders the data plane for picker (and shed, when not "") in
// front of pool.
func bootstrap(picker, shed string, pool *Pool, mode DataPlane) ([]byte, error) {
	const fd = "FULL_DUPLEX_STREAMED"
	main := listenerSpec{Picker: "picker", ReqMode: fd, RespMode: fd, Trailers: "SEND"}
	switch mode {
	case FullDuplex, "":
	case StreamedEarlyBody:
		main = listenerSpec{Picker: "picker", ReqMode: "STREAMED", RespMode: "STREAMED", Trailers: "SKIP", EarlyBody: true}
	default:
		return nil, fmt.Errorf("data plane %q: want %s or %s", mode, FullDuplex, StreamedEarlyBody)
	}
	with := func(l listenerSpec, name, cluster string) listenerSpec {
		l.Name, l.Cluster = name, cluster
		return l
	}
	meta := with(main, "meta", "pool_meta")
	meta.Retries = true
	data := struct {
		Listeners []listenerSpec
		Pickers   []pickerSpec
		Clusters  []clusterSpec
		Hosts     []hostPort
	}{
		Listeners: []listenerSpec{
			{Name: "fdx", Cluster: "pool_header", Picker: "picker", ReqMode: fd, RespMode: fd, Trailers: "SEND"},
			with(main, "main", "pool_header"),
			meta,
			{Name: "buffered", Cluster: "pool_header", Picker: "picker", ReqMode: "BUFFERED", RespMode: "STREAMED", Trailers: "SKIP"},
			with(main, "h2c", "pool_h2c"),
		},
		Clusters: []clusterSpec{{Name: "pool_header"}, {Name: "pool_meta", Metadata: true}, {Name: "pool_h2c", H2C: true}},
	}
	add := func(name, addr string) error {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("picker address %q: %w", addr, err)
		}
		data.Pickers = append(data.Pickers, pickerSpec{Name: name, Host: host, Port: port})
		return nil
	}
	if err := add("picker", picker); err != nil {
		return nil, err
	}
	if shed != "" {
		if err := add("shed_picker", shed); err != nil {
			return nil, err
		}
		l := with(main, "shed", "pool_header")
		l.Picker = "shed_picker"
		data.Listeners = append(data.Listeners, l)
	}
	for _, ep := range append(append([]string{}, pool.Endpoints...), pool.Canary) {
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", ep, err)
		}
		data.Hosts = append(data.Hosts, hostPort{host, port})
	}
	var b bytes.Buffer
	if err := bootstrapTmpl.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// dataPlane is the running Envoy: base URLs per listener.
type dataPlane struct {
	envoy *envoytest.Envoy
	urls  map[string]string
}

func (d *dataPlane) url(listener string) string { return d.urls[listener] }

// startDataPlane runs Envoy (bin) with the bootstrap, working in dir.
func startDataPlane(ctx context.Context, bin, dir string, config []byte, log io.Writer) (*dataPlane, error) {
	e, err := envoytest.Launch(ctx, bin, config, dir, log)
	if err != nil {
		return nil, err
	}
	d := &dataPlane{envoy: e, urls: map[string]string{}}
	for name, addr := range e.Listeners {
		d.urls[name] = "http://" + addr
	}
	return d, nil
}

func (d *dataPlane) stop() { d.envoy.Stop() }

// extprocStats sums Envoy's ext_proc counters over the listeners, by
// counter name (spurious_msgs_received, message_timeouts, …).
func (d *dataPlane) extprocStats() map[string]int {
	out := map[string]int{}
	b, err := httpGet("http://" + d.envoy.Admin + "/stats?filter=ext_proc")
	if err != nil {
		return out
	}
	for ln := range strings.SplitSeq(b, "\n") {
		k, v, ok := strings.Cut(ln, ": ")
		if _, name, found := strings.Cut(k, ".ext_proc."); ok && found {
			var n int
			fmt.Sscan(v, &n)
			out[name] += n
		}
	}
	return out
}
