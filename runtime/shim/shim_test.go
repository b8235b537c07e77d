package shim

import (
	"runtime"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/bundle"
)

// TestWithProxyEnv: a tool's environment gains exactly the proxy
// variables; a service's own proxy settings are replaced, its own
// NO_PROXY is kept.
func TestWithProxyEnv(t *testing.T) {
	tool := WithProxyEnv(bundle.Env)
	want := append(slices.Clone(bundle.Env),
		"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1,::1",
		"http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1")
	if !slices.Equal(tool, want) {
		t.Errorf("a tool's environment:\n got %q\nwant %q", tool, want)
	}
	svc := WithProxyEnv([]string{"PATH=/usr/bin", "https_proxy=http://evil:1", "All_Proxy=socks5://x:1", "NO_PROXY=", "TOKEN=t"})
	want = []string{
		"PATH=/usr/bin", "NO_PROXY=", "TOKEN=t",
		"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
		"http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
	}
	if !slices.Equal(svc, want) {
		t.Errorf("a service's environment:\n got %q\nwant %q", svc, want)
	}
}

// BenchmarkJoinNewSessionKeyring is the cost of the enter shim's keyring
// step alone: one keyctl that makes a new keyring (the one it replaces is
// freed by the kernel's key collector).
func BenchmarkJoinNewSessionKeyring(b *testing.B) {
	done := make(chan error)
	go func() {
		// Never unlocked: the thread, with the keyrings it joined, ends
		// with this goroutine.
		runtime.LockOSThread()
		var err error
		for b.Loop() {
			if err = joinNewSessionKeyring(); err != nil {
				break
			}
		}
		done <- err
	}()
	if err := <-done; err != nil {
		b.Skipf("SKIPPING: %v", err)
	}
}
