// Package envoy holds Envoy configurations for running warmpath (the YAML
// files beside this one) and the strict loader that the tests use to prove
// every field in them is one Envoy knows.
package envoy

import (
	"encoding/json"
	"fmt"
	"os"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	// The typed configs the bootstraps use, registered for Any resolution.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// LoadBootstrap reads a bootstrap YAML file and decodes it strictly: an
// unknown field anywhere, including inside typed_config, is an error. The
// result is also checked with the protos' validation rules.
func LoadBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var bs bootstrapv3.Bootstrap
	if err := DecodeYAML(b, &bs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := bs.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &bs, nil
}

// DecodeYAML decodes YAML into m through protojson, rejecting unknown fields.
func DecodeYAML(b []byte, m proto.Message) error {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("yaml to json: %w", err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(j, m); err != nil {
		return fmt.Errorf("decode %T: %w", m, err)
	}
	return nil
}

// MarshalBootstrap renders bs as JSON, which Envoy reads as YAML.
func MarshalBootstrap(bs *bootstrapv3.Bootstrap) ([]byte, error) {
	return protojson.MarshalOptions{Indent: "  "}.Marshal(bs)
}
