package extproc

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/scoring"
)

// The Endpoint Picker protocol's parts of the routing room (Gateway API
// Inference Extension, docs/proposals/004-endpoint-picker-protocol, v1.0.0):
// the subset hint that restricts the candidates, the destination list with
// its fallbacks, the per-endpoint scores (the v1.1 proposal), the served
// endpoint the proxy reports on the response path, and the conformance
// suite's two test-only hooks.

// Protocol keys.
const (
	subsetKey = "x-gateway-destination-endpoint-subset"
	servedKey = "x-gateway-destination-endpoint-served"
	scoresKey = "x-gateway-destination-endpoint-scores"
	// The conformance hooks (Config.ConformanceTestHooks).
	testSelectionHeader = "test-epp-endpoint-selection"
	testServedHeader    = "x-conformance-test-served-endpoint"
)

// maxFallbacks bounds Config.Fallbacks; a proxy retries a handful of times.
const maxFallbacks = 16

// maxSubsetEntries bounds how many endpoints one hint may name; the rest
// are ignored (an InferencePool has at most a few hundred endpoints).
const maxSubsetEntries = 4096

// endpointSet is the set of endpoints a subset hint (or the test selection
// header) names. The zero value is "no hint": every endpoint is allowed.
type endpointSet struct {
	// present is set when the hint was given, even empty or unusable: then
	// only the endpoints named are allowed.
	present bool
	// addrs holds normalised host:port entries, hosts the bare hosts (any
	// port of theirs is allowed, as the reference picker does).
	addrs map[string]bool
	hosts map[string]bool
}

// hintForm says how a subset hint was written, for the counter.
type hintForm string

const (
	hintNone    hintForm = ""
	hintList    hintForm = "list"
	hintString  hintForm = "string"
	hintInvalid hintForm = "invalid" // neither: nothing is eligible
)

// subsetHint reads the subset hint from Envoy's forwarded metadata: under
// namespace ns, the key x-gateway-destination-endpoint-subset holds a list
// of "ip:port" strings or one comma-separated string (header_to_metadata
// writes the latter); list items may themselves be comma-separated. Any
// other value is a hint that names no endpoint. ns "" ignores hints.
func subsetHint(md *corev3.Metadata, ns string) (endpointSet, hintForm) {
	if ns == "" {
		return endpointSet{}, hintNone
	}
	v, ok := md.GetFilterMetadata()[ns].GetFields()[subsetKey]
	if !ok {
		return endpointSet{}, hintNone
	}
	set := endpointSet{present: true}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		set.add(k.StringValue)
		return set, hintString
	case *structpb.Value_ListValue:
		for _, item := range k.ListValue.GetValues() {
			if s, ok := item.GetKind().(*structpb.Value_StringValue); ok {
				set.add(s.StringValue)
			}
		}
		return set, hintList
	}
	return set, hintInvalid
}

// selectionOf parses the test selection header's comma-separated list.
func selectionOf(v string) endpointSet {
	set := endpointSet{present: true}
	set.add(v)
	return set
}

// add adds every comma-separated entry of list.
func (s *endpointSet) add(list string) {
	for e := range strings.SplitSeq(list, ",") {
		if len(s.addrs)+len(s.hosts) >= maxSubsetEntries {
			return
		}
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if host, port, err := net.SplitHostPort(e); err == nil {
			if s.addrs == nil {
				s.addrs = make(map[string]bool)
			}
			s.addrs[net.JoinHostPort(normHost(host), port)] = true
			continue
		}
		if s.hosts == nil {
			s.hosts = make(map[string]bool)
		}
		s.hosts[normHost(strings.TrimSuffix(strings.TrimPrefix(e, "["), "]"))] = true
	}
}

// empty reports whether the set names no endpoint at all.
func (s *endpointSet) empty() bool { return len(s.addrs) == 0 && len(s.hosts) == 0 }

// allows reports whether the endpoint at addr (host:port) may be picked.
func (s *endpointSet) allows(addr string) bool {
	if !s.present {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return s.addrs[addr] || s.hosts[strings.ToLower(addr)]
	}
	h := normHost(host)
	return s.addrs[net.JoinHostPort(h, port)] || s.hosts[h]
}

// normHost writes an IP address canonically (so ::0:1 and ::1 agree) and
// lower-cases a name.
func normHost(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return strings.ToLower(h)
}

// sameEndpoint reports whether two host:port strings name one endpoint.
func sameEndpoint(a, b string) bool {
	if a == b {
		return true
	}
	s := endpointSet{present: true}
	s.add(a)
	return len(s.addrs) == 1 && s.allows(b)
}

// filterWorkers keeps the workers whose address set allows, in order. It
// returns ws itself when set is not present.
func filterWorkers(ws []discovery.Worker, set *endpointSet) []discovery.Worker {
	if !set.present {
		return ws
	}
	var out []discovery.Worker
	for _, w := range ws {
		if set.allows(w.Address) {
			out = append(out, w)
		}
	}
	return out
}

// destinations is the ordered destination list for d: the chosen worker's
// address, then up to n other candidates' by the policy's score (lower
// first; ties in candidate order), each address once.
func destinations(d *scoring.Decision, n int) []string {
	out := []string{d.Address}
	if n <= 0 || len(d.Candidates) < 2 {
		return out
	}
	idx := make([]int, 0, len(d.Candidates))
	for i := range d.Candidates {
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(d.Candidates[a].Score, d.Candidates[b].Score) })
	for _, i := range idx {
		if len(out) > n {
			break
		}
		if a := d.Candidates[i].Address; a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// scoresValue maps every candidate's address to its predicted time to
// first token in seconds.
func scoresValue(d *scoring.Decision) *structpb.Value {
	f := make(map[string]*structpb.Value, len(d.Candidates))
	for _, c := range d.Candidates {
		if c.Address != "" {
			f[c.Address] = structpb.NewNumberValue(max(c.PredictedTTFT.Seconds(), 0))
		}
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: f})
}

// servedEndpoint reads the endpoint the proxy reports as the one that
// served the request: filter_metadata[ns]["x-gateway-destination-endpoint-served"],
// "" when absent.
func servedEndpoint(md *corev3.Metadata, ns string) string {
	return strings.TrimSpace(md.GetFilterMetadata()[ns].GetFields()[servedKey].GetStringValue())
}
