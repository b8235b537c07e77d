package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/oci"
)

// ociFlags choose and place the OCI runtime of --backend oci.
type ociFlags struct {
	runtime string
	runDir  string
}

func (f *ociFlags) register(fs *flag.FlagSet) {
	var names []string
	for _, n := range oci.KnownRuntimes() {
		names = append(names, string(n))
	}
	fs.StringVar(&f.runtime, "oci-runtime", string(oci.Runc), "OCI runtime of --backend oci: "+strings.Join(names, ", "))
	fs.StringVar(&f.runDir, "oci-run-dir", "", "directory for the oci backend's rootfs, bundles and runtime state (default "+oci.DefaultRunDir()+")")
}

// ociConfig is the oci backend's configuration from the flags.
func (s *settings) ociConfig(shim string) (oci.Config, error) {
	name, err := oci.ParseRuntime(s.oci.runtime)
	if err != nil {
		return oci.Config{}, fmt.Errorf("--oci-runtime: %w", err)
	}
	return oci.Config{Runtime: name, Shim: shim, RunDir: s.oci.runDir, Limits: s.sandbox.limits}, nil
}

// prepareOCISandbox checks the oci backend and returns how to start it
// (log may be nil: nothing is logged). On error the error says why the
// runtime cannot run here. The started backend's close removes its
// containers and directories.
func (s *settings) prepareOCISandbox(shim string, _ *cgroup.Manager, log *logrus.Logger) (sandboxStart, error) {
	cfg, err := s.ociConfig(shim)
	if err != nil {
		return nil, err
	}
	r, err := oci.Prepare(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (startedSandbox, error) {
		if err := r.Start(ctx); err != nil {
			return startedSandbox{}, err
		}
		if log != nil {
			for _, d := range r.Swept() {
				log.WithField("dir", d).Info("removed the containers and bundles of a server that did not exit cleanly")
			}
			log.WithField("oci", r.String()).Debug("oci backend ready")
		}
		return startedSandbox{runner: r, describe: r.String, close: r.Close}, nil
	}, nil
}
