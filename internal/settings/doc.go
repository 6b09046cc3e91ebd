// Package settings is the one table of Sluice's settings: each row makes a
// flag, its SLUICE_* environment twin, and its line in the docs' table. It
// validates them, translates envoyproxy/ratelimit's environment into them
// (peerenv.go, peer_xds.go: flag > SLUICE_* > the peer's name > default),
// and reports what is in force, for the start-up lines and /config
// (report.go).
//
// It knows no listener, store or config source: it imports only the pkg/
// packages whose values it parses, and internal/app and internal/source
// import it.
package settings
