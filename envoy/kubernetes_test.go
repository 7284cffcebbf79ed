package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The Kubernetes objects below are checked against hand-written mirrors of
// the subset of each CRD's schema they use, decoded with unknown fields
// rejected; Envoy configuration embedded in them is decoded strictly into
// go-control-plane protos.

type meta struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
}

type objectHead struct {
	APIVersion string    `yaml:"apiVersion"`
	Kind       string    `yaml:"kind"`
	Metadata   meta      `yaml:"metadata"`
	Spec       yaml.Node `yaml:"spec"`
}

type targetRef struct {
	Group string `yaml:"group"`
	Kind  string `yaml:"kind"`
	Name  string `yaml:"name"`
}

type envoyFilterSpec struct {
	WorkloadSelector struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"workloadSelector"`
	ConfigPatches []struct {
		ApplyTo string         `yaml:"applyTo"`
		Match   map[string]any `yaml:"match"`
		Patch   struct {
			Operation string         `yaml:"operation"`
			Value     map[string]any `yaml:"value"`
		} `yaml:"patch"`
	} `yaml:"configPatches"`
}

// clusterSettings mirrors Envoy Gateway's ClusterSettings (an ext_proc's
// backendSettings) as far as the failover between warmpath replicas uses
// it: api/v1alpha1 shared_types.go, healthcheck_types.go, retry_types.go.
type clusterSettings struct {
	HealthCheck struct {
		Active struct {
			Type string `yaml:"type"`
			GRPC struct {
				Service string `yaml:"service"`
			} `yaml:"grpc"`
			Timeout            string `yaml:"timeout"`
			Interval           string `yaml:"interval"`
			UnhealthyThreshold uint32 `yaml:"unhealthyThreshold"`
			HealthyThreshold   uint32 `yaml:"healthyThreshold"`
		} `yaml:"active"`
		Passive struct {
			SplitExternalLocalOriginErrors bool   `yaml:"splitExternalLocalOriginErrors"`
			ConsecutiveLocalOriginFailures uint32 `yaml:"consecutiveLocalOriginFailures"`
			Interval                       string `yaml:"interval"`
			BaseEjectionTime               string `yaml:"baseEjectionTime"`
			MaxEjectionPercent             uint32 `yaml:"maxEjectionPercent"`
		} `yaml:"passive"`
	} `yaml:"healthCheck"`
	Retry struct {
		NumRetries uint32 `yaml:"numRetries"`
		RetryOn    struct {
			Triggers []string `yaml:"triggers"`
		} `yaml:"retryOn"`
		PerRetry struct {
			BackOff struct {
				BaseInterval string `yaml:"baseInterval"`
				MaxInterval  string `yaml:"maxInterval"`
			} `yaml:"backOff"`
		} `yaml:"perRetry"`
	} `yaml:"retry"`
}

// failover is the Envoy configuration Envoy Gateway makes of c: the ext_proc
// grpc_service's retry_policy and the ext_proc cluster's health check and
// outlier detection.
func (c clusterSettings) failover() (failover, error) {
	var errs []error
	dur := func(field, s string) *durationpb.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		return durationpb.New(d)
	}
	a, p, r := c.HealthCheck.Active, c.HealthCheck.Passive, c.Retry
	if a.Type != "GRPC" {
		errs = append(errs, fmt.Errorf("healthCheck.active.type %q, want GRPC", a.Type))
	}
	f := failover{
		retries: []*corev3.RetryPolicy{{
			RetryOn:    strings.Join(r.RetryOn.Triggers, ","),
			NumRetries: wrapperspb.UInt32(r.NumRetries),
			RetryBackOff: &corev3.BackoffStrategy{
				BaseInterval: dur("retry.perRetry.backOff.baseInterval", r.PerRetry.BackOff.BaseInterval),
				MaxInterval:  dur("retry.perRetry.backOff.maxInterval", r.PerRetry.BackOff.MaxInterval),
			},
		}},
		health: []*corev3.HealthCheck{{
			Timeout:            dur("healthCheck.active.timeout", a.Timeout),
			Interval:           dur("healthCheck.active.interval", a.Interval),
			UnhealthyThreshold: wrapperspb.UInt32(a.UnhealthyThreshold),
			HealthyThreshold:   wrapperspb.UInt32(a.HealthyThreshold),
			HealthChecker: &corev3.HealthCheck_GrpcHealthCheck_{
				GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{ServiceName: a.GRPC.Service},
			},
		}},
		outlier: &clusterv3.OutlierDetection{
			SplitExternalLocalOriginErrors: p.SplitExternalLocalOriginErrors,
			ConsecutiveLocalOriginFailure:  wrapperspb.UInt32(p.ConsecutiveLocalOriginFailures),
			Interval:                       dur("healthCheck.passive.interval", p.Interval),
			BaseEjectionTime:               dur("healthCheck.passive.baseEjectionTime", p.BaseEjectionTime),
			MaxEjectionPercent:             wrapperspb.UInt32(p.MaxEjectionPercent),
		},
	}
	return f, errors.Join(errs...)
}

type extensionPolicySpec struct {
	TargetRefs []targetRef `yaml:"targetRefs"`
	ExtProc    []struct {
		BackendRefs []struct {
			Group string `yaml:"group"`
			Kind  string `yaml:"kind"`
			Name  string `yaml:"name"`
			Port  int    `yaml:"port"`
		} `yaml:"backendRefs"`
		BackendSettings clusterSettings `yaml:"backendSettings"`
		ProcessingMode  struct {
			Request  struct{ Body string } `yaml:"request"`
			Response struct{ Body string } `yaml:"response"`
		} `yaml:"processingMode"`
		FailOpen       bool   `yaml:"failOpen"`
		MessageTimeout string `yaml:"messageTimeout"`
		Metadata       struct {
			WritableNamespaces []string `yaml:"writableNamespaces"`
		} `yaml:"metadata"`
	} `yaml:"extProc"`
}

type backendTrafficPolicySpec struct {
	TargetRefs   []targetRef `yaml:"targetRefs"`
	LoadBalancer struct {
		Type             string `yaml:"type"`
		EndpointOverride struct {
			ExtractFrom []struct {
				Header string `yaml:"header"`
			} `yaml:"extractFrom"`
		} `yaml:"endpointOverride"`
	} `yaml:"loadBalancer"`
}

// backendTLSPolicySpec is the part of Gateway API's BackendTLSPolicy the
// configuration uses.
type backendTLSPolicySpec struct {
	TargetRefs []struct {
		Group       string `yaml:"group"`
		Kind        string `yaml:"kind"`
		Name        string `yaml:"name"`
		SectionName string `yaml:"sectionName"`
	} `yaml:"targetRefs"`
	Validation struct {
		CACertificateRefs []targetRef `yaml:"caCertificateRefs"`
		Hostname          string      `yaml:"hostname"`
	} `yaml:"validation"`
}

// peerAuthenticationSpec and authorizationPolicySpec are the parts of
// Istio's security objects the configuration uses.
type peerAuthenticationSpec struct {
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	MTLS struct {
		Mode string `yaml:"mode"`
	} `yaml:"mtls"`
}

type authorizationPolicySpec struct {
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Action string `yaml:"action"`
	Rules  []struct {
		From []struct {
			Source struct {
				Principals []string `yaml:"principals"`
			} `yaml:"source"`
		} `yaml:"from"`
		To []struct {
			Operation struct {
				Ports []string `yaml:"ports"`
			} `yaml:"operation"`
		} `yaml:"to"`
	} `yaml:"rules"`
}

// checkAuthorization checks that only the listed principals reach the
// ext_proc port: every rule that admits 9002 names its sources.
func checkAuthorization(s authorizationPolicySpec) error {
	if s.Action != "ALLOW" || s.Selector.MatchLabels["app.kubernetes.io/name"] != "warmpath" {
		return errors.New("want an ALLOW policy selecting warmpath's pods")
	}
	admitted := false
	for _, r := range s.Rules {
		for _, to := range r.To {
			if !slices.Contains(to.Operation.Ports, "9002") {
				continue
			}
			admitted = true
			if len(r.From) == 0 {
				return errors.New("a rule admits anyone to the ext_proc port 9002")
			}
			for _, f := range r.From {
				if len(f.Source.Principals) == 0 {
					return errors.New("a rule admits the ext_proc port 9002 without naming principals")
				}
			}
		}
	}
	if !admitted {
		return errors.New("no rule admits the gateway to the ext_proc port 9002")
	}
	return nil
}

// envoyProxySpec is the part of Envoy Gateway's EnvoyProxy the
// configuration uses.
type envoyProxySpec struct {
	BackendTLS struct {
		ClientCertificateRef targetRef `yaml:"clientCertificateRef"`
	} `yaml:"backendTLS"`
}

type httpRouteSpec struct {
	ParentRefs []struct {
		Name string `yaml:"name"`
	} `yaml:"parentRefs"`
	Rules []struct {
		Matches []struct {
			Path struct {
				Type  string `yaml:"type"`
				Value string `yaml:"value"`
			} `yaml:"path"`
		} `yaml:"matches"`
		BackendRefs []struct {
			Group string `yaml:"group"`
			Kind  string `yaml:"kind"`
			Name  string `yaml:"name"`
			Port  int    `yaml:"port"`
		} `yaml:"backendRefs"`
		Timeouts struct {
			Request string `yaml:"request"`
		} `yaml:"timeouts"`
	} `yaml:"rules"`
}

type inferencePoolSpec struct {
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	TargetPorts []struct {
		Number int `yaml:"number"`
	} `yaml:"targetPorts"`
	AppProtocol       string `yaml:"appProtocol"`
	EndpointPickerRef struct {
		Name string `yaml:"name"`
		Port struct {
			Number int `yaml:"number"`
		} `yaml:"port"`
		FailureMode string `yaml:"failureMode"`
	} `yaml:"endpointPickerRef"`
}

// decodeStrict decodes a YAML node into v, rejecting unknown fields.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

func protoStrict(v any, m proto.Message) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return DecodeYAML(b, m)
}

func readObjects(t *testing.T, path string) []objectHead {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var out []objectHead
	for {
		var o objectHead
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, o)
	}
}

func TestKubernetesObjects(t *testing.T) {
	t.Parallel()
	want := referenceFailover(t)
	kinds := map[string]int{}
	for _, path := range []string{"kubernetes/istio-envoyfilter.yaml", "kubernetes/envoy-gateway.yaml", "kubernetes/inferencepool.yaml"} {
		for _, o := range readObjects(t, path) {
			kinds[o.Kind]++
			var err error
			switch o.APIVersion + " " + o.Kind {
			case "networking.istio.io/v1alpha3 EnvoyFilter":
				var s envoyFilterSpec
				if err = decodeStrict(&o.Spec, &s); err == nil {
					err = checkEnvoyFilter(s, want)
				}
			case "security.istio.io/v1 PeerAuthentication":
				var s peerAuthenticationSpec
				if err = decodeStrict(&o.Spec, &s); err == nil && (s.MTLS.Mode != "STRICT" || s.Selector.MatchLabels["app.kubernetes.io/name"] != "warmpath") {
					err = errors.New("warmpath's pods must require STRICT mutual TLS")
				}
			case "security.istio.io/v1 AuthorizationPolicy":
				var s authorizationPolicySpec
				if err = decodeStrict(&o.Spec, &s); err == nil {
					err = checkAuthorization(s)
				}
			case "gateway.envoyproxy.io/v1alpha1 EnvoyExtensionPolicy":
				var s extensionPolicySpec
				if err = decodeStrict(&o.Spec, &s); err == nil {
					ep := s.ExtProc[0]
					if ep.FailOpen || ep.ProcessingMode.Request.Body != "FullDuplexStreamed" || ep.ProcessingMode.Response.Body != "FullDuplexStreamed" ||
						ep.BackendRefs[0].Port != 9002 || ep.Metadata.WritableNamespaces[0] != "envoy.lb" {
						err = errors.New("extProc must be fail-closed FullDuplexStreamed to warmpath:9002 writing envoy.lb")
					} else if f, ferr := ep.BackendSettings.failover(); ferr != nil {
						err = ferr
					} else {
						// Envoy Gateway's active health check has no field for
						// no_traffic_interval; the rest must match envoy.yaml.
						eg := want
						eg.health = []*corev3.HealthCheck{proto.Clone(want.health[0]).(*corev3.HealthCheck)}
						eg.health[0].NoTrafficInterval = nil
						err = f.differs(eg)
					}
				}
			case "gateway.envoyproxy.io/v1alpha1 BackendTrafficPolicy":
				var s backendTrafficPolicySpec
				if err = decodeStrict(&o.Spec, &s); err == nil && s.LoadBalancer.EndpointOverride.ExtractFrom[0].Header != "x-gateway-destination-endpoint" {
					err = errors.New("endpointOverride must read x-gateway-destination-endpoint")
				}
			case "gateway.networking.k8s.io/v1 BackendTLSPolicy":
				// warmpath's ext_proc port is mutual TLS: the gateway checks
				// its certificate for the Service's name.
				var s backendTLSPolicySpec
				if err = decodeStrict(&o.Spec, &s); err == nil && (len(s.TargetRefs) != 1 || s.TargetRefs[0].Name != "warmpath" ||
					s.TargetRefs[0].SectionName != "extproc" || len(s.Validation.CACertificateRefs) != 1 || s.Validation.Hostname != "warmpath.llm.svc.cluster.local") {
					err = errors.New("BackendTLSPolicy must verify warmpath's extproc port against one CA, for warmpath.llm.svc.cluster.local")
				}
			case "gateway.envoyproxy.io/v1alpha1 EnvoyProxy":
				var s envoyProxySpec
				if err = decodeStrict(&o.Spec, &s); err == nil && (s.BackendTLS.ClientCertificateRef.Kind != "Secret" || s.BackendTLS.ClientCertificateRef.Name == "") {
					err = errors.New("EnvoyProxy must present a client certificate from a Secret to backends")
				}
			case "gateway.networking.k8s.io/v1 HTTPRoute":
				var s httpRouteSpec
				err = decodeStrict(&o.Spec, &s)
			case "inference.networking.k8s.io/v1 InferencePool":
				var s inferencePoolSpec
				if err = decodeStrict(&o.Spec, &s); err == nil && (s.EndpointPickerRef.Name != "warmpath" || s.EndpointPickerRef.Port.Number != 9002 || s.EndpointPickerRef.FailureMode != "FailClose") {
					err = errors.New("endpointPickerRef must name warmpath:9002, fail closed")
				}
				if err == nil {
					err = checkInferencePool(s)
				}
			default:
				t.Errorf("%s: unexpected object %s %s", path, o.APIVersion, o.Kind)
			}
			if err != nil {
				t.Errorf("%s: %s %s: %v", path, o.Kind, o.Metadata.Name, err)
			}
		}
	}
	for _, k := range []string{"EnvoyFilter", "PeerAuthentication", "AuthorizationPolicy", "EnvoyExtensionPolicy", "BackendTrafficPolicy", "BackendTLSPolicy", "EnvoyProxy", "HTTPRoute", "InferencePool"} {
		if kinds[k] == 0 {
			t.Errorf("no %s checked", k)
		}
	}
}

// checkInferencePool checks what the InferencePool API validates: one to
// eight unique target ports, an appProtocol of its enum.
func checkInferencePool(s inferencePoolSpec) error {
	if n := len(s.TargetPorts); n < 1 || n > 8 {
		return fmt.Errorf("%d targetPorts: want 1 to 8", n)
	}
	seen := map[int]bool{}
	for _, p := range s.TargetPorts {
		if seen[p.Number] || p.Number < 1 || p.Number > 65535 {
			return fmt.Errorf("targetPorts: %d repeated or not a port", p.Number)
		}
		seen[p.Number] = true
	}
	if s.AppProtocol != "" && s.AppProtocol != "http" && s.AppProtocol != "kubernetes.io/h2c" {
		return fmt.Errorf("appProtocol %q: want http or kubernetes.io/h2c", s.AppProtocol)
	}
	return nil
}

// checkEnvoyFilter checks the patches, and that together they fail over
// between warmpath replicas as want does.
func checkEnvoyFilter(s envoyFilterSpec, want failover) error {
	var got failover
	for _, p := range s.ConfigPatches {
		switch p.ApplyTo {
		case "HTTP_FILTER":
			var f hcmv3.HttpFilter
			if err := protoStrict(p.Patch.Value, &f); err != nil {
				return err
			}
			var ep filterv3.ExternalProcessor
			if err := f.GetTypedConfig().UnmarshalTo(&ep); err != nil {
				return err
			}
			if ep.GetFailureModeAllow() || ep.GetProcessingMode().GetRequestBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
				return errors.New("ext_proc must fail closed in FULL_DUPLEX_STREAMED")
			}
			if err := ep.ValidateAll(); err != nil {
				return err
			}
			got.retries = append(got.retries, ep.GetGrpcService().GetRetryPolicy())
		case "CLUSTER":
			var c clusterv3.Cluster
			if err := protoStrict(p.Patch.Value, &c); err != nil {
				return err
			}
			switch p.Patch.Operation {
			case "ADD":
				if c.GetOriginalDstLbConfig().GetHttpHeaderName() != "x-gateway-destination-endpoint" {
					return errors.New("ORIGINAL_DST cluster must read x-gateway-destination-endpoint")
				}
			case "MERGE": // into Istio's cluster of the warmpath Service
				m, _ := p.Match["cluster"].(map[string]any)
				if m["service"] != "warmpath.llm.svc.cluster.local" || m["portNumber"] != 9002 {
					return fmt.Errorf("cluster patch matches %v, want warmpath.llm.svc.cluster.local port 9002", p.Match["cluster"])
				}
				got.health, got.outlier = c.GetHealthChecks(), c.GetOutlierDetection()
			default:
				return errors.New("unexpected cluster patch operation " + p.Patch.Operation)
			}
		case "HTTP_ROUTE":
			var r routev3.Route
			if err := protoStrict(p.Patch.Value, &r); err != nil {
				return err
			}
		default:
			return errors.New("unexpected applyTo " + p.ApplyTo)
		}
	}
	return got.differs(want)
}

func TestKubernetesSchemaRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("endpointPickerRef: {name: warmpath, prot: {number: 9002}}\n"), &n); err != nil {
		t.Fatal(err)
	}
	var s inferencePoolSpec
	if err := decodeStrict(n.Content[0], &s); err == nil {
		t.Fatal("a misspelt field was accepted")
	}
}
