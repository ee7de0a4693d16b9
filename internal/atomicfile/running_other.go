//go:build !unix

package atomicfile

import "os"

// processRunning reports whether a process with ID pid may exist: where
// FindProcess cannot tell, it says yes, so nothing live is swept.
func processRunning(pid int) bool {
	_, err := os.FindProcess(pid)
	return err == nil
}
