package runtime

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Cost is what a set of processes holds on the host: for the idle cost of
// prepared sandboxes (doctor, the bench).
type Cost struct {
	// Processes counts them.
	Processes int `json:"processes"`
	// RSSKiB sums their resident set sizes (shared pages counted in each);
	// PSSKiB their proportional set sizes (shared pages divided among
	// those that map them), from smaps_rollup.
	RSSKiB int64 `json:"rss_kib"`
	PSSKiB int64 `json:"pss_kib"`
	// Cgroups counts the distinct cgroups they are in, over every
	// hierarchy, that the process measured from (the server) is not in.
	Cgroups int `json:"cgroups"`
}

// DescendantsCost is the cost of every process below pid (pid itself not
// included): at rest, a server's prepared sandboxes and the services it
// runs.
func DescendantsCost(pid int) Cost {
	return costOf(pid, descendants(pid))
}

// Cost is what the prepared sandbox holds on the host: its processes
// (the exec chain, the shim waiting inside; for OCI, the runtime's init or
// sandbox and gofer), their memory and the cgroups they are in.
func (s *Standby) Cost() Cost {
	return costOf(os.Getpid(), append([]int{s.pid}, descendants(s.pid)...))
}

func costOf(self int, pids []int) Cost {
	own := map[string]bool{}
	for _, l := range cgroupLines(self) {
		own[l] = true
	}
	groups := map[string]bool{}
	var c Cost
	for _, p := range pids {
		st := procStatusKiB(p)
		if st == nil {
			continue
		}
		c.Processes++
		c.RSSKiB += st["VmRSS"]
		c.PSSKiB += pss(p)
		for _, l := range cgroupLines(p) {
			if !own[l] {
				groups[l] = true
			}
		}
	}
	c.Cgroups = len(groups)
	return c
}

// procStatusKiB returns the figures of /proc/PID/status by key,
// nil when the process is gone.
func procStatusKiB(pid int) map[string]int64 {
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

// pss is the proportional set size of pid in KiB.
func pss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pss:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// cgroupLines are the lines of /proc/PID/cgroup: one per hierarchy.
func cgroupLines(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, d := range Descendants(pid) {
		out = append(out, d.Pid)
	}
	return out
}

// Proc is a process of /proc/PID/stat: its pid and its state letter ('Z'
// for a zombie).
type Proc struct {
	Pid   int
	State byte
}

// Descendants lists every process below pid (pid itself not included),
// from one scan of the ppid of each process in /proc.
func Descendants(pid int) []Proc {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]Proc{}
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
		children[pp] = append(children[pp], Proc{Pid: p, State: f[0][0]})
	}
	var out []Proc
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
