//go:build !linux

package prefault

import "syscall"

func populate([]byte) syscall.Errno { return 0 }

func adviseHuge([]byte) {}
