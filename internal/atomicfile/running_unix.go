//go:build unix

package atomicfile

import (
	"errors"
	"syscall"
)

// processRunning reports whether a process with ID pid exists: signal 0
// checks without sending anything (EPERM: it exists, owned by another).
func processRunning(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
