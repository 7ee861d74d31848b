//go:build !linux

package backend

// preciseThread does nothing where the kernel offers no timer slack to
// set.
func preciseThread() {}
