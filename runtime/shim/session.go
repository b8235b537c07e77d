package shim

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// session is the first process of a prepared helper sandbox (a built-in's
// git, tokei or ctags: rt.Session). Unlike the standby shim it does not
// exec: it stays the sandbox's PID 1 and runs, one after another, the
// commands the server sends on the release channel, each with its own
// streams, until the channel closes:
//
//   - each command is checked against the shape the sandbox was prepared
//     with (CheckCommand: the exe and the fixed prefix of its argv, and
//     its first further word one of the verbs), and a command of another
//     shape ends the sandbox without running anything;
//   - it runs as the shim's child with exactly bundle.Env plus the
//     sandbox's own variables, the three descriptors of its message as 0,
//     1 and 2, and nothing else open;
//   - once it exits, every other process of the sandbox is killed and
//     reaped (PID 1's kill(-1)), so that nothing a command started
//     outlives it, holds its streams or meets the next command; then its
//     status goes back to the server.
//
// The shim is not dumpable: a process of the sandbox, which runs as the
// same uid, can neither ptrace it nor open its descriptors under
// /proc/1/fd, so the release channel stays the server's and the shim's
// alone. Signals from inside are ignored (a pid namespace's init gets
// only those it handles).
func session(s Spec) int {
	if s.ReleaseFD < 3 {
		die(125, "session: no release channel")
	}
	if s.Egress != "" {
		die(125, "session: a helper sandbox has no egress proxy")
	}
	if os.Getpid() != 1 {
		die(125, "session: not the first process of its sandbox (pid %d): it could not end what a command leaves", os.Getpid())
	}
	setRlimits(s.Rlimits)
	// Nothing the sandbox was started with reaches a command (every
	// descriptor from 3 up, the release channel included, is closed at
	// its exec), nor can a command reach the shim.
	harden()
	if err := signalReady(s.ReleaseFD, 0); err != nil {
		die(125, "session: ready: %v", err)
	}
	env := toolEnv(s.Env)
	for {
		argv, fds, err := awaitCommand(s.ReleaseFD)
		if errors.Is(err, errDiscarded) {
			endAll()
			return 0
		}
		if err != nil {
			die(125, "session: %v", err)
		}
		if err := CheckCommand(s.Argv, s.Verbs, argv); err != nil {
			fmt.Fprintf(os.NewFile(uintptr(fds[2]), "stderr"), "toolgate: session: %v\n", err)
			die(125, "session: %v", err)
		}
		code := runCommand(s.Path, argv, env, fds)
		endAll()
		if err := sendStatus(s.ReleaseFD, code); err != nil {
			die(125, "session: status: %v", err)
		}
	}
}

// runCommand runs path with argv as a child whose stdin, stdout and stderr
// are fds (closed here once it has them), reaps orphans until it exits,
// and returns its status (128+N for signal N; 126 or 127 when it could not
// start, as a shell reports it, with the reason on its stderr).
func runCommand(path string, argv, env []string, fds []int) int {
	onMainThread("session") // the parent-death signal is the thread's (startTool)
	pid, err := forkExec(path, argv, env, []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])})
	if err != nil {
		fmt.Fprintf(os.NewFile(uintptr(fds[2]), "stderr"), "toolgate: start %s: %v\n", path, err)
		closeAll(fds)
		if errors.Is(err, syscall.E2BIG) {
			return 126
		}
		return 127
	}
	closeAll(fds)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			die(125, "session: wait: %v", err)
		case got != pid:
			continue
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// endAll kills every other process of the sandbox (the shim is its PID 1:
// kill(-1) reaches all of them and not itself) and reaps them until none
// is left; a process forked meanwhile is killed on the next round.
func endAll() {
	for {
		_ = unix.Kill(-1, unix.SIGKILL)
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.ECHILD) {
			return
		}
	}
}

// CheckCommand says why argv is not a command a helper session prepared
// with prefix and verbs may run (nil: it may). A command is the prefix,
// word for word (the helper's exe as configured and the arguments fixed
// when the sandbox was made: git's -c settings, its --git-dir), then, when
// verbs are given, one of them (git's subcommand), then anything; with no
// verbs, the prefix then anything. No word may hold a NUL byte. The server
// checks before it sends, and the shim again before it runs.
func CheckCommand(prefix, verbs, argv []string) error {
	if len(prefix) == 0 {
		return errors.New("no prefix: a session runs only the commands of its helper")
	}
	if len(argv) < len(prefix) || !slices.Equal(argv[:len(prefix)], prefix) {
		return fmt.Errorf("command %q does not begin with the session's fixed argv %q", clipArgv(argv), prefix)
	}
	if len(verbs) > 0 && (len(argv) == len(prefix) || !slices.Contains(verbs, argv[len(prefix)])) {
		return fmt.Errorf("command %q: the word after the fixed argv must be one of %q", clipArgv(argv), verbs)
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("a command's argument holds a NUL byte")
		}
	}
	return nil
}

// clipArgv is argv for an error message: at most 8 words of 64 bytes.
func clipArgv(argv []string) []string {
	out := make([]string, 0, min(len(argv), 9))
	for i, a := range argv {
		if i == 8 {
			out = append(out, "...")
			break
		}
		if len(a) > 64 {
			a = a[:64] + "..."
		}
		out = append(out, a)
	}
	return out
}
