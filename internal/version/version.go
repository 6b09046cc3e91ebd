// Package version is the version the sluice binary reports (sluice version,
// --version, /config, the image's labels). A release's version is the
// semantic version in the repository's VERSION file, which its tag (v
// followed by it) names; the build stamps it into stamp with
//
//	-ldflags "-X github.com/sluicehq/sluice/internal/version.stamp=$(cat VERSION)"
//
// as the Makefile, the Dockerfile, the image build and the release build
// do.
package version

import "runtime/debug"

// stamp is the version the build set with -ldflags -X; empty when none did.
var stamp string

// String returns the version the binary reports: the build's stamp, else
// the module version Go recorded (go install module@v0.3.0), else
// "dev-" and the VCS revision Go recorded (with -dirty for uncommitted
// changes), else "dev".
func String() string {
	if stamp != "" {
		return stamp
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo is String's answer for an unstamped build described by bi.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			dirty = kv.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}
