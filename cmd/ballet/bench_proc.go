package main

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// The benches read processes' CPU, memory and system calls from /proc
// through prometheus/procfs (the library client_golang's process collector
// uses).

// procStat is the CPU (user + system) and parent of a process.
type procStat struct {
	cpu, children time.Duration
	ppid          int
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on Linux.
const clockTick = 10 * time.Millisecond

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procStat{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return procStat{}, err
	}
	return procStat{
		cpu:      time.Duration(st.UTime+st.STime) * clockTick,
		children: time.Duration(st.CUTime+st.CSTime) * clockTick,
		ppid:     st.PPID,
	}, nil
}

// procRunTime is the CPU time of a process to the nanosecond: the sum of
// its living threads' run time (the first field of
// /proc/<pid>/task/<tid>/schedstat, user and system alike, what getrusage
// adds up for this process). A thread that exited takes its share with it,
// which a Go process, whose threads live as long as it does, does not do.
// 0 when /proc cannot be read.
func procRunTime(pid int) time.Duration {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, t := range threads {
		if st, err := t.Schedstat(); err == nil {
			total += time.Duration(st.RunningNanoseconds)
		}
	}
	return total
}

// serverCPU is the CPU of a Postgres server: the postmaster, every living
// child (backends of all databases, WAL writer, checkpointer, autovacuum)
// and the children it has reaped. 0 when /proc cannot be read.
func serverCPU(postmaster int) time.Duration {
	pm, err := readProcStat(postmaster)
	if err != nil {
		return 0
	}
	total := pm.cpu + pm.children
	procs, _ := procfs.AllProcs()
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PPID == postmaster {
			total += time.Duration(st.UTime+st.STime) * clockTick
		}
	}
	return total
}

// procMemory is a process's resident set now and at its peak (VmRSS,
// VmHWM of /proc/<pid>/status) in KiB; zeros when it cannot be read.
func procMemory(pid int) (rssKiB, peakKiB int64) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0
	}
	return int64(st.VmRSS / 1024), int64(st.VmHWM / 1024)
}

// peakRSS is a process's peak resident set as printed, e.g. "51200 kB".
func peakRSS(pid int) string {
	if _, peak := procMemory(pid); peak > 0 {
		return fmt.Sprintf("%d kB", peak)
	}
	return "unknown"
}

// syscalls are the read and write system calls of this process so far
// (/proc/self/io); zeros when it cannot be read.
func syscalls() (reads, writes uint64) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0
	}
	io, err := p.IO()
	if err != nil {
		return 0, 0
	}
	return io.SyscR, io.SyscW
}
