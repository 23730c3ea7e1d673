//go:build !linux

package cputime

import "time"

// Thread is 0: this system's thread CPU clock is not read.
func Thread() time.Duration { return 0 }
