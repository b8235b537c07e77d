package probes

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// KEY_SPEC_SESSION_KEYRING and KEY_SPEC_PROCESS_KEYRING, variables so
// that their negative values convert to system call arguments.
var (
	keySpecSessionKeyring = -3
	keySpecProcessKeyring = -2
)

// The keyctl(2) operations the keyring modes use (linux/keyctl.h).
const (
	keyctlGetKeyringID = 0  // KEYCTL_GET_KEYRING_ID
	keyctlDescribe     = 6  // KEYCTL_DESCRIBE
	keyctlLink         = 8  // KEYCTL_LINK
	keyctlSearch       = 10 // KEYCTL_SEARCH
	keyctlRead         = 11 // KEYCTL_READ
)

// cstr is s as a NUL-terminated string for a system call.
func cstr(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}

// keyctl is keyctl(2) with up to three arguments after the operation.
func keyctl(op int, a2, a3, a4 uintptr) (int, error) {
	r, _, e := syscall.Syscall6(syscall.SYS_KEYCTL, uintptr(op), a2, a3, a4, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// keyctlBuf runs a keyctl operation that fills a buffer (describe, read)
// and returns what it wrote.
func keyctlBuf(op int, id int) (string, error) {
	buf := make([]byte, 4096)
	n, err := keyctl(op, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(buf[:min(n, len(buf))]), "\x00"), nil
}

// sessionKeyring prints the process's session keyring (its id and
// description) and, for each serial given, whether the key can be read
// and what it holds. It only reads: safe anywhere (the enter shim's test
// runs it on the host).
func sessionKeyring(serials []string) {
	id, err := keyctl(keyctlGetKeyringID, uintptr(keySpecSessionKeyring), 0, 0)
	if err != nil {
		fmt.Printf("session keyring: %s\n", result(err))
	} else {
		desc, err := keyctlBuf(keyctlDescribe, id)
		if err != nil {
			desc = result(err)
		}
		fmt.Printf("session keyring: %d %s\n", id, desc)
	}
	for _, s := range serials {
		serial := atoi(s)
		payload, err := keyctlBuf(keyctlRead, serial)
		if err != nil {
			fmt.Printf("read key %d: %s\n", serial, result(err))
		} else {
			fmt.Printf("read key %d: ok %q\n", serial, payload)
		}
	}
}

// keyring (mode keyring KEY RING DESC [CHILDREN HOLD_MS]) tries every way
// a sandboxed process could reach the server's session keyring, which
// holds key KEY (type user, description DESC) in keyring RING: find its
// own session keyring, read the key, search for it, list it in
// /proc/keys, and (only as PID 1 of a pid namespace, since they would
// change the host's keyrings) ask request_key for it and link a keyring
// of its own into its session keyring and into RING (add_key; a process
// keyring and KEYCTL_LINK). Each line says ok (with what it got) or
// denied ERRNO. With CHILDREN and HOLD_MS, it first starts CHILDREN
// processes that live HOLD_MS milliseconds, and stays as long itself, so
// that the host can count, meanwhile, the references the sandbox's
// processes hold to RING.
func keyring(args []string) {
	keySerial, ringSerial, desc := atoi(arg(args, 0)), atoi(arg(args, 1)), arg(args, 2)
	var hold time.Duration
	if len(args) > 3 {
		hold = time.Duration(atoi(arg(args, 4))) * time.Millisecond
		n, started := atoi(args[3]), 0
		var err error
		for started < n {
			if err = self("keyring-child", args[4]).Start(); err != nil {
				break
			}
			started++
		}
		fmt.Printf("children: %d of %d: %s\n", started, n, result(err))
	}
	id, err := keyctl(keyctlGetKeyringID, uintptr(keySpecSessionKeyring), 0, 0)
	fmt.Printf("keyctl session keyring: %s\n", okOr(id, err))
	payload, err := keyctlBuf(keyctlRead, keySerial)
	if err == nil {
		fmt.Printf("keyctl read: ok %q\n", payload)
	} else {
		fmt.Printf("keyctl read: %s\n", result(err))
	}
	found, err := keyctl(keyctlSearch, uintptr(keySpecSessionKeyring), uintptr(unsafe.Pointer(cstr("user"))), uintptr(unsafe.Pointer(cstr(desc))))
	fmt.Printf("keyctl search: %s\n", okOr(found, err))
	procKeys(keySerial, ringSerial, desc)
	if !sandboxed() {
		fmt.Println("keyring links: not tried outside a sandbox (they would change the host's keyrings)")
	} else {
		r, _, e := syscall.Syscall6(syscall.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(cstr("user"))), uintptr(unsafe.Pointer(cstr(desc))), 0, 0, 0, 0)
		fmt.Printf("request_key: %s\n", okOr(int(r), errnoOrNil(e)))
		// A keyring of its own in its session keyring: what a later call
		// sharing the keyring would find.
		r, _, e = syscall.Syscall6(syscall.SYS_ADD_KEY, uintptr(unsafe.Pointer(cstr("keyring"))), uintptr(unsafe.Pointer(cstr("toolgate-probe-ring"))),
			0, 0, uintptr(keySpecSessionKeyring), 0)
		fmt.Printf("add_key keyring: %s\n", okOr(int(r), errnoOrNil(e)))
		// With keyctl alone: a process keyring of its own, linked into
		// its session keyring and into the server's by serial.
		pk, err := keyctl(keyctlGetKeyringID, uintptr(keySpecProcessKeyring), 1, 0)
		fmt.Printf("keyctl process keyring: %s\n", okOr(pk, err))
		n, err := keyctl(keyctlLink, uintptr(keySpecProcessKeyring), uintptr(keySpecSessionKeyring), 0)
		fmt.Printf("keyctl link into the session keyring: %s\n", okOr(n, err))
		n, err = keyctl(keyctlLink, uintptr(keySpecProcessKeyring), uintptr(ringSerial), 0)
		fmt.Printf("keyctl link into the server's keyring: %s\n", okOr(n, err))
	}
	time.Sleep(hold)
}

// procKeys reports whether /proc/keys lists the key or its keyring.
func procKeys(keySerial, ringSerial int, desc string) {
	f, err := os.Open("/proc/keys")
	if err != nil {
		fmt.Printf("/proc/keys: %s\n", result(err))
		return
	}
	defer f.Close()
	key, ring := fmt.Sprintf("%08x", keySerial), fmt.Sprintf("%08x", ringSerial)
	keyListed, ringListed, lines := false, false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		keyListed = keyListed || fields[0] == key || strings.Contains(sc.Text(), " "+desc+":")
		ringListed = ringListed || fields[0] == ring
	}
	fmt.Printf("/proc/keys: %d lines, key listed: %v, keyring listed: %v\n", lines, keyListed, ringListed)
}

func okOr(n int, err error) string {
	if err != nil {
		return result(err)
	}
	return "ok " + strconv.Itoa(n)
}

func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
