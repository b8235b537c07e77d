package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/egress"
)

// HostRoots is the host's trust store, the roots a sandbox with a
// credential trusts besides the server CA (Debian's and its derivatives'
// path; a host without it gives the CA alone).
var HostRoots = "/etc/ssl/certs/ca-certificates.crt"

// trustFiles are the server CA's trust files, written once per server
// start into the egress root: the CA's certificate, and the host's roots
// with it appended. Both are public (0644), and linked into each
// credentialed call's egress directory.
var trustFiles struct {
	once sync.Once
	err  error
}

// linkTrust links the trust files (made at the first call) into dir.
func linkTrust(root, dir string) error {
	trustFiles.once.Do(func() { trustFiles.err = writeTrust(root) })
	if trustFiles.err != nil {
		return trustFiles.err
	}
	for _, name := range []string{bundle.TrustBundle, bundle.TrustCA} {
		if err := os.Link(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("trust files: %w", err)
		}
	}
	return nil
}

func writeTrust(root string) error {
	ca, err := egress.ServerCA()
	if err != nil {
		return err
	}
	roots, err := os.ReadFile(HostRoots)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("trust files: %w", err)
	}
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	for name, b := range map[string][]byte{bundle.TrustCA: ca.PEM(), bundle.TrustBundle: append(roots, ca.PEM()...)} {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p+".new", b, 0o644); err != nil {
			return fmt.Errorf("trust files: %w", err)
		}
		if err := os.Chmod(p+".new", 0o644); err != nil {
			return fmt.Errorf("trust files: %w", err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			return fmt.Errorf("trust files: %w", err)
		}
	}
	return nil
}
