package main

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/proc"
)

// procStatus reads the "Key: value" lines of /proc/PID/status.
func procStatus(pid int) map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// kib parses "1234 kB".
func kib(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n
}

// rss returns VmRSS and VmHWM of pid in KiB.
func rss(pid int) (cur, peak int64) {
	st := procStatus(pid)
	return kib(st["VmRSS"]), kib(st["VmHWM"])
}

func threads(pid int) int {
	n, _ := strconv.Atoi(procStatus(pid)["Threads"])
	return n
}

func openFDs(pid int) int {
	e, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(e)
}

// descendants returns every process below pid, and how many of them are
// zombies.
func descendants(pid int) (all, zombies int) {
	for _, d := range proc.Descendants(pid) {
		all++
		if d.State == 'Z' {
			zombies++
		}
	}
	return all, zombies
}

// cgroupDirs counts the directories at or below a directory named
// toolgate-<pid> anywhere under /sys/fs/cgroup.
func cgroupDirs(pid int) int {
	name := "toolgate-" + strconv.Itoa(pid)
	n := 0
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Contains(p+"/", "/"+name+"/") {
			n++
		}
		return nil
	})
	return n
}

// processesInCgroups counts the live processes in a cgroup of server pid
// (a path with toolgate-<pid> in /proc/*/cgroup).
func processesInCgroups(pid int) int {
	name := "/toolgate-" + strconv.Itoa(pid)
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(b), name+"/") && !strings.Contains(string(b), name+"\n") && !strings.Contains(string(b), name+".") {
			continue
		}
		n++
	}
	return n
}

// cpuTime returns the user+system CPU time pid has used.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return time.Duration(u+s) * 10 * time.Millisecond
}
