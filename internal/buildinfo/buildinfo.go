// Package buildinfo reports the version of the running binary.
package buildinfo

import "runtime/debug"

// Version is set at link time (-ldflags "-X .../buildinfo.Version=v1.2.3"); when it is
// not, the module version or VCS revision recorded by the go command is used.
var Version = ""

// String returns the best known version of this binary.
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel+" + rev
}
