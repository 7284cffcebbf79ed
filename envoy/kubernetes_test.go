package envoy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
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

type extensionPolicySpec struct {
	TargetRefs []targetRef `yaml:"targetRefs"`
	ExtProc    []struct {
		BackendRefs []struct {
			Group string `yaml:"group"`
			Kind  string `yaml:"kind"`
			Name  string `yaml:"name"`
			Port  int    `yaml:"port"`
		} `yaml:"backendRefs"`
		ProcessingMode struct {
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
	kinds := map[string]int{}
	for _, path := range []string{"kubernetes/istio-envoyfilter.yaml", "kubernetes/envoy-gateway.yaml", "kubernetes/inferencepool.yaml"} {
		for _, o := range readObjects(t, path) {
			kinds[o.Kind]++
			var err error
			switch o.APIVersion + " " + o.Kind {
			case "networking.istio.io/v1alpha3 EnvoyFilter":
				var s envoyFilterSpec
				if err = decodeStrict(&o.Spec, &s); err == nil {
					err = checkEnvoyFilter(s)
				}
			case "gateway.envoyproxy.io/v1alpha1 EnvoyExtensionPolicy":
				var s extensionPolicySpec
				if err = decodeStrict(&o.Spec, &s); err == nil {
					ep := s.ExtProc[0]
					if ep.FailOpen || ep.ProcessingMode.Request.Body != "FullDuplexStreamed" || ep.ProcessingMode.Response.Body != "FullDuplexStreamed" ||
						ep.BackendRefs[0].Port != 9002 || ep.Metadata.WritableNamespaces[0] != "envoy.lb" {
						err = errors.New("extProc must be fail-closed FullDuplexStreamed to warmpath:9002 writing envoy.lb")
					}
				}
			case "gateway.envoyproxy.io/v1alpha1 BackendTrafficPolicy":
				var s backendTrafficPolicySpec
				if err = decodeStrict(&o.Spec, &s); err == nil && s.LoadBalancer.EndpointOverride.ExtractFrom[0].Header != "x-gateway-destination-endpoint" {
					err = errors.New("endpointOverride must read x-gateway-destination-endpoint")
				}
			case "gateway.networking.k8s.io/v1 HTTPRoute":
				var s httpRouteSpec
				err = decodeStrict(&o.Spec, &s)
			case "inference.networking.k8s.io/v1 InferencePool":
				var s inferencePoolSpec
				if err = decodeStrict(&o.Spec, &s); err == nil && (s.EndpointPickerRef.Name != "warmpath" || s.EndpointPickerRef.Port.Number != 9002 || s.EndpointPickerRef.FailureMode != "FailClose") {
					err = errors.New("endpointPickerRef must name warmpath:9002, fail closed")
				}
			default:
				t.Errorf("%s: unexpected object %s %s", path, o.APIVersion, o.Kind)
			}
			if err != nil {
				t.Errorf("%s: %s %s: %v", path, o.Kind, o.Metadata.Name, err)
			}
		}
	}
	for _, k := range []string{"EnvoyFilter", "EnvoyExtensionPolicy", "BackendTrafficPolicy", "HTTPRoute", "InferencePool"} {
		if kinds[k] == 0 {
			t.Errorf("no %s checked", k)
		}
	}
}

func checkEnvoyFilter(s envoyFilterSpec) error {
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
		case "CLUSTER":
			var c clusterv3.Cluster
			if err := protoStrict(p.Patch.Value, &c); err != nil {
				return err
			}
			if c.GetOriginalDstLbConfig().GetHttpHeaderName() != "x-gateway-destination-endpoint" {
				return errors.New("ORIGINAL_DST cluster must read x-gateway-destination-endpoint")
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
	return nil
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
