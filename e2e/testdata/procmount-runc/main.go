// Command procmount-runc is the OCI runtime the kube e2e test gives
// `podman kube play`: runc, except that a toolgate container gets the
// unmasked /proc its manifest asks for (securityContext.procMount:
// Unmasked), which podman 4.3's kube play does not read (containers/podman
// #19881, supported from podman 4.7). It changes nothing else: at `runc
// create` it empties linux.maskedPaths and drops the /proc entries of
// linux.readonlyPaths of a container whose process is the toolgate
// binary, exactly what podman --security-opt systempaths=unconfined does,
// then execs runc with the same arguments.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	runc := os.Getenv("PROCMOUNT_RUNC")
	if runc == "" {
		runc = "/usr/sbin/runc"
	}
	args := os.Args[1:]
	if bundle := bundleOf(args); bundle != "" {
		if err := unmask(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintf(os.Stderr, "procmount-runc: %v\n", err)
			os.Exit(1)
		}
	}
	if err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "procmount-runc: exec %s: %v\n", runc, err)
		os.Exit(1)
	}
}

// bundleOf returns the --bundle of a `create` or `run`, or "".
func bundleOf(args []string) string {
	create := false
	bundle := ""
	for i, a := range args {
		switch {
		case a == "create" || a == "run":
			create = true
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			bundle = args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		}
	}
	if !create {
		return ""
	}
	return bundle
}

func unmask(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	proc, _ := spec["process"].(map[string]any)
	argv, _ := proc["args"].([]any)
	if len(argv) == 0 || argv[0] != "/usr/local/bin/toolgate" {
		return nil
	}
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		return nil
	}
	delete(linux, "maskedPaths")
	if ro, ok := linux["readonlyPaths"].([]any); ok {
		var keep []any
		for _, p := range ro {
			if s, _ := p.(string); !strings.HasPrefix(s, "/proc/") {
				keep = append(keep, p)
			}
		}
		linux["readonlyPaths"] = keep
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
