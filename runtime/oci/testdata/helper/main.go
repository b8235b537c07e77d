// Command helper is the tool the runtime/oci tests run inside containers.
// It is built by the tests (go build) and is never installed. Modes that
// probe the sandbox refuse to run unless they are PID 1 of a new pid
// namespace with only lo in their network namespace, so that a broken
// sandbox never lets them touch the host.
package main

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: helper MODE [ARGS]")
		os.Exit(2)
	}
	mode, args := os.Args[1], os.Args[2:]
	switch mode {
	case "exit":
		n, _ := strconv.Atoi(args[0])
		os.Exit(n)
	case "out":
		// Alternate stdout and stderr: one stream keeps the order.
		for i := 0; i < 3; i++ {
			fmt.Fprintf(os.Stdout, "out%d\n", i)
			fmt.Fprintf(os.Stderr, "err%d\n", i)
		}
	case "env":
		env := os.Environ()
		sort.Strings(env)
		fmt.Println(strings.Join(env, "\n"))
	case "cwd":
		wd, err := os.Getwd()
		if err != nil {
			fail("getwd: %v", err)
		}
		fmt.Println(wd)
	case "write":
		// write PATH...: one line "PATH ok" or "PATH error" per path.
		mustBeSandboxed()
		for _, p := range args {
			err := os.WriteFile(p, []byte("x"), 0o644)
			if err != nil {
				fmt.Printf("%s error %v\n", p, err)
				continue
			}
			fmt.Printf("%s ok\n", p)
		}
	case "net":
		// net ADDR: list interfaces, then try to connect to ADDR.
		mustBeSandboxed()
		ifs, err := net.Interfaces()
		if err != nil {
			fail("interfaces: %v", err)
		}
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		fmt.Printf("interfaces %s\n", strings.Join(names, ","))
		c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
		if err != nil {
			fmt.Printf("connect error %v\n", err)
			return
		}
		c.Close()
		fmt.Println("connect ok")
	case "sleep":
		d, _ := time.ParseDuration(args[0])
		fmt.Println("sleeping")
		time.Sleep(d)
	case "flood":
		// flood N: write N bytes alternating stdout and stderr.
		n, _ := strconv.ParseInt(args[0], 10, 64)
		buf := []byte(strings.Repeat("x", 64<<10))
		for n > 0 {
			w := os.Stdout
			if n%2 == 0 {
				w = os.Stderr
			}
			k := min(int64(len(buf)), n)
			if _, err := w.Write(buf[:k]); err != nil {
				fail("write after flood: %v", err)
			}
			n -= k
		}
	case "id":
		fmt.Printf("uid %d gid %d pid %d\n", os.Getuid(), os.Getgid(), os.Getpid())
	case "status":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fail("status: %v", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp:"} {
				if strings.HasPrefix(l, k) {
					fmt.Println(strings.Join(strings.Fields(l), " "))
				}
			}
		}
	default:
		fail("unknown mode %q", mode)
	}
}

// mustBeSandboxed refuses to go on outside a new pid namespace with a
// private network namespace (only lo).
func mustBeSandboxed() {
	if os.Getpid() > 10 {
		fail("refusing to run: pid %d, not in a new pid namespace", os.Getpid())
	}
	ifs, err := net.Interfaces()
	if err != nil {
		fail("refusing to run: interfaces: %v", err)
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			fail("refusing to run: interface %q: not in a private network namespace", i.Name)
		}
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "helper: "+format+"\n", a...)
	os.Exit(111)
}
