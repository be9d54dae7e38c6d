// Package protect stands in for suah.dev/protect, which the Go module proxy refuses here (403), in the
// builds vpnlab makes of programs that import it (yggdrasil-go's commands). The real package wraps
// OpenBSD's pledge(2) and unveil(2) and does nothing on every other system: so does this one, with the
// same functions. vpnlab's own code (src/vpnlab/tools/gobuild.py, GoBuild.stand_ins).
package protect

// Pledge restricts the process to the promises on OpenBSD; elsewhere it does nothing.
func Pledge(promises string) error { return nil }

// Unveil exposes path with flags on OpenBSD; elsewhere it does nothing.
func Unveil(path string, flags string) error { return nil }

// UnveilBlock forbids further unveil calls on OpenBSD; elsewhere it does nothing.
func UnveilBlock() error { return nil }
