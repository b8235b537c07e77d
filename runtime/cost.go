package runtime

import (
	"os"

	procfs "github.com/toolgate/toolgate/internal/proc"
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
	for _, l := range procfs.Cgroups(self) {
		own[l] = true
	}
	groups := map[string]bool{}
	var c Cost
	for _, p := range pids {
		st := procfs.StatusKiB(p)
		if st == nil {
			continue
		}
		c.Processes++
		c.RSSKiB += st["VmRSS"]
		c.PSSKiB += procfs.PSS(p)
		for _, l := range procfs.Cgroups(p) {
			if !own[l] {
				groups[l] = true
			}
		}
	}
	c.Cgroups = len(groups)
	return c
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, d := range procfs.Descendants(pid) {
		out = append(out, d.Pid)
	}
	return out
}
