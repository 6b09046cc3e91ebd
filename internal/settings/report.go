package settings

// Report is what the settings say at start, one log line each: what
// envoyproxy/ratelimit's variables set, and those of its variables that
// Sluice does not apply.
type Report struct {
	// Peer lists the Sluice settings the peer's variables set, one line
	// each: "--redis-url=redis://host:6379 (REDIS_URL, REDIS_SOCKET_TYPE)",
	// then what Sluice does with the set variables that need no setting.
	Peer []string
	// PeerWarnings lists the set peer variables Sluice does not apply, each
	// with what it does instead.
	PeerWarnings []string
}

// Report returns what s reports at start.
func (s *Settings) Report() Report {
	if s.peer == nil {
		return Report{}
	}
	return Report{Peer: s.peer.applied(), PeerWarnings: s.peer.warnings}
}
