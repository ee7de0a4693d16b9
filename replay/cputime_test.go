package replay

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user + system) this process has used.
// Benchmarks report it next to wall time because the machines they run on
// are shared: wall time there measures the neighbours too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults returns the page faults the process has taken without I/O
// (getrusage's minor faults): a count the machine's load leaves alone.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}
