package peers

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Config is the peers section of warmpath's configuration: the other
// replicas this one shares its in-flight ledger with. Sharing is on when
// TokenFile is set. Field comments give the unit and the default.
type Config struct {
	// TokenFile holds the secret every replica shares (any bytes; leading
	// and trailing white space is trimmed). A follower proves it by sending
	// it, a replica by the HMAC of the follower's nonce, so neither side
	// trusts a stranger. Empty (default) turns sharing off.
	TokenFile string `yaml:"token_file"`
	// Static lists other replicas' ext_proc addresses (host:port).
	Static []string `yaml:"static"`
	// DNS is host:port of a name whose addresses are the replicas, such as
	// a Kubernetes headless Service; each address with port is a peer.
	DNS string `yaml:"dns"`
	// DNSInterval is how often DNS is resolved again. Default 5s.
	DNSInterval time.Duration `yaml:"dns_interval"`
	// Advertise is the host:port other replicas reach this one at, sent to
	// the replicas it follows so that they follow it back. Default: the
	// ext_proc listen address, with the connection's source address as
	// host when the listen address has none.
	Advertise string `yaml:"advertise"`
	// Heartbeat is how often an idle replica tells its followers it is
	// alive. Default 200ms.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// Linger is how long a change waits for others to share its frame: the
	// delay before peers see it, against the cost of a frame per change.
	// Default 1ms.
	Linger time.Duration `yaml:"linger"`
	// StaleAfter marks a peer stale (decisions say they used a stale
	// view) when nothing came from it that long. Default 1s.
	StaleAfter time.Duration `yaml:"stale_after"`
	// ExpireAfter drops a peer's assignments when nothing came from it that
	// long: what a replica that died had in flight stops loading the
	// workers. Default 5s.
	ExpireAfter time.Duration `yaml:"expire_after"`
	// Lessons shares what each outcome taught this replica's calibration
	// with its followers, and fits theirs (scoring.Lesson): behind N
	// replicas each sees 1/N of the outcomes, and without the others'
	// its models learn each worker N times slower. Default true.
	Lessons bool `yaml:"lessons"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{DNSInterval: 5 * time.Second, Heartbeat: 200 * time.Millisecond, Linger: time.Millisecond,
		StaleAfter: time.Second, ExpireAfter: 5 * time.Second, Lessons: true}
}

// Enabled reports whether ledger sharing is on.
func (c *Config) Enabled() bool { return c.TokenFile != "" }

// Validate reports every invalid field, joined. It reads TokenFile.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !c.Enabled() {
		if len(c.Static) > 0 || c.DNS != "" {
			bad("token_file: required with static or dns peers")
		}
		return errors.Join(errs...)
	}
	if _, err := readToken(c.TokenFile); err != nil {
		bad("token_file: %w", err)
	}
	for i, a := range c.Static {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("static[%d]: want host:port, got %q", i, a)
		}
	}
	if c.DNS != "" {
		if _, _, err := net.SplitHostPort(c.DNS); err != nil {
			bad("dns: want host:port, got %q", c.DNS)
		}
	}
	if c.Advertise != "" {
		if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
			bad("advertise: want host:port, got %q", c.Advertise)
		}
	}
	if c.DNSInterval <= 0 || c.Heartbeat <= 0 || c.StaleAfter <= 0 || c.ExpireAfter <= 0 {
		bad("dns_interval, heartbeat, stale_after, expire_after: must be positive")
	}
	if c.Linger < 0 || c.Linger >= c.Heartbeat {
		bad("linger: %v, want 0 ≤ linger < heartbeat", c.Linger)
	}
	if c.StaleAfter < 2*c.Heartbeat || c.ExpireAfter < c.StaleAfter {
		bad("want heartbeat × 2 ≤ stale_after ≤ expire_after, got %v, %v, %v", c.Heartbeat, c.StaleAfter, c.ExpireAfter)
	}
	return errors.Join(errs...)
}

// minToken is the shortest secret accepted.
const minToken = 16

// readToken reads the shared secret.
func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read peer token: %w", err)
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if len(tok) < minToken {
		return nil, fmt.Errorf("peer token in %s: %d bytes, want at least %d", path, len(tok), minToken)
	}
	return tok, nil
}
