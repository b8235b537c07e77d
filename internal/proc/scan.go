package proc

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Process is a process of /proc/PID/stat: its pid and its state letter
// ('Z' for a zombie).
type Process struct {
	Pid   int
	State byte
}

// Descendants lists every process below pid (pid itself not included),
// from one scan of the ppid of each process in /proc.
func Descendants(pid int) []Process {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]Process{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) S ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 > len(b) {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], Process{Pid: p, State: f[0][0]})
	}
	var out []Process
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 1<<16 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.Pid)
		}
	}
	return out
}

// StatusKiB returns the figures of /proc/PID/status by key (VmRSS, ...),
// nil when the process is gone.
func StatusKiB(pid int) map[string]int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// PSS is the proportional set size of pid in KiB, from smaps_rollup; 0
// when it cannot be read.
func PSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pss:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// Cgroups are the lines of /proc/PID/cgroup: one per hierarchy; nil when
// the process is gone.
func Cgroups(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// FDs lists the descriptors open in this process, from /proc/self/fd (the
// directory's own descriptor, closed by the time it returns, included).
func FDs() ([]int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	fds := make([]int, 0, len(names))
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}
