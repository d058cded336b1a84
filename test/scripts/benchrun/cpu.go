package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// cpuSplit is CPU time in seconds so far, by who spent it: the service,
// the PostgreSQL server (postmaster and every backend) and this process
// (the load's clients). All three share the machine's cores.
type cpuSplit struct{ service, postgres, client float64 }

// sub returns c - a.
func (c cpuSplit) sub(a cpuSplit) cpuSplit {
	return cpuSplit{c.service - a.service, c.postgres - a.postgres, c.client - a.client}
}

// cpuNow reads the CPU time of the service s, of the PostgreSQL server of
// BOOKING_TEST_PG_DATADIR (NaN without one) and of this process.
func cpuNow(s *service) cpuSplit {
	var ru syscall.Rusage
	client := math.NaN()
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		client = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return cpuSplit{service: s.cpuSeconds(), postgres: postgresCPUSeconds(), client: client}
}

// postgresCPUSeconds is the user+system CPU time of the PostgreSQL server
// so far: the postmaster's own and its exited children's (cutime, cstime),
// and that of every live child (backends, walwriter, checkpointer, …).
func postgresCPUSeconds() float64 {
	b, err := os.ReadFile(filepath.Join(os.Getenv("BOOKING_TEST_PG_DATADIR"), "postmaster.pid"))
	if err != nil {
		return math.NaN()
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return math.NaN()
	}
	f, ok := procStat(pid)
	if !ok {
		return math.NaN()
	}
	total := ticks(f, 11) + ticks(f, 12) + ticks(f, 13) + ticks(f, 14)
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if f, ok := procStat(child); ok && ticks(f, 1) == float64(pid) {
			total += ticks(f, 11) + ticks(f, 12)
		}
	}
	return total / 100 // USER_HZ
}

// procStat returns the fields of /proc/PID/stat after the command's name
// (field 3, the state, is index 0; utime is index 11).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil, false
	}
	return strings.Fields(s[i+2:]), true
}

// ticks parses field i of f (a count of clock ticks or a pid).
func ticks(f []string, i int) float64 {
	if i >= len(f) {
		return 0
	}
	v, _ := strconv.ParseFloat(f[i], 64)
	return v
}
