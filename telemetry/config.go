package telemetry

// Config is the telemetry section of warmpath's configuration: what goes on
// the spans. Whether and where spans are exported is set by the standard
// OTEL_* environment variables (see Setup).
type Config struct {
	// CapturePrompts puts the request's messages or prompt on the GenAI
	// span (gen_ai.input.messages). Prompts are user data. Default false.
	CapturePrompts bool `yaml:"capture_prompts"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{} }
