//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"

	"github.com/toolgate/toolgate/internal/mcptest"
)

// The operations on the cluster: a ConfigMap edit picked up live, rolling
// updates under continuous calls through the Service (a restart; a new
// image tag with a changed ConfigMap) losing no call, a pod deleted
// mid-call, and the figures of the workload (calls/s and latency through
// the Service, one pod's memory at rest).

// confWith is the shipped tools.conf plus the test's slow tool.
const confWith = `# tool <name> <abspath> <read|test> <timeout-s> <max-bytes> <on|off> <dir> -- <fixed args...>
tool git_status /usr/bin/git test 30 65536 on /workspace -- status --short
tool git_log /usr/bin/git test 30 65536 on /workspace -- log --oneline -20
tool slow /bin/sleep test 30 1024 on /workspace -- %d
`

// setConf replaces toolgate-conf's tools.conf.
func (k *kube) setConf(t *testing.T, conf string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"data": map[string]string{"tools.conf": conf}})
	k.must(t, "patch", "configmap", "toolgate-conf", "--type=merge", "-p", string(b))
}

// callers are clients calling a tool through the Service without pause
// until stopped, counting each call's outcome.
type callers struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startCallers(n int, hc *http.Client, token, tool string) *callers {
	cs := &callers{stop: make(chan struct{})}
	for i := range n {
		cs.wg.Go(func() { cs.run(i, hc, token, tool) })
	}
	return cs
}

// run is one client: it calls until stopped, connecting again after a
// failure.
func (cs *callers) run(i int, hc *http.Client, token, tool string) {
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for {
		select {
		case <-cs.stop:
			return
		default:
		}
		var err error
		if c == nil {
			// Stateless (2026-07-28): any replica answers any request.
			c, err = mcptest.Dial(context.Background(), "http://toolgate:8080/mcp", mcptest.Options{Token: token, HTTP: hc, Name: fmt.Sprintf("caller-%d", i), Timeout: 20 * time.Second})
		}
		if err == nil {
			err = callOK(c, tool)
		}
		if err != nil {
			cs.failed.Add(1)
			cs.mu.Lock()
			cs.errs = append(cs.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
			cs.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		cs.ok.Add(1)
	}
}

// callOK calls tool and returns an error unless it answered as git_status
// does in the pods' empty workspace.
func callOK(c *client.Client, tool string) error {
	res, err := call1(c, tool)
	if err != nil {
		return err
	}
	if res.IsError && !strings.Contains(text(res), "not a git repository") {
		return fmt.Errorf("isError: %s", text(res))
	}
	return nil
}

func (cs *callers) end() (ok, failed int64, errs []string) {
	close(cs.stop)
	cs.wg.Wait()
	return cs.ok.Load(), cs.failed.Load(), cs.errs
}

// underCalls runs step while 4 clients call git_status through the
// Service, and fails t if any call failed.
func underCalls(t *testing.T, k *kube, token, what string, step func()) {
	t.Helper()
	hc, _ := k.serviceClient(t)
	cs := startCallers(4, hc, token, "git_status")
	time.Sleep(2 * time.Second)
	start := time.Now()
	step()
	// Until the old pods are gone: their SIGTERM and drain come after
	// the rollout's end (the preStop sleep), and must be under calls too.
	k.settle(t, 2)
	time.Sleep(2 * time.Second)
	ok, failed, errs := cs.end()
	figure(t, "%s under 4 continuous clients: %d calls ok, %d failed, %.1f s", what, ok, failed, time.Since(start).Seconds())
	if failed > 0 || ok < 20 {
		t.Errorf("%s: %d calls failed of %d (want none, and at least 20 made): %s", what, failed, ok+failed, strings.Join(errs, "; "))
	}
}

// settle waits until the Deployment has exactly n pods, none of them
// terminating.
func (k *kube) settle(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		all := strings.Fields(k.must(t, "get", "pods", "-l", "app.kubernetes.io/name=toolgate", "-o", "jsonpath={.items[*].metadata.name}"))
		if len(all) == n && len(k.pods(t)) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods %v: want %d, none terminating", all, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func clusterOperations(t *testing.T, k *kube, token string) {
	t.Run("configmap edit picked up live", func(t *testing.T) {
		before := k.pods(t)
		k.setConf(t, fmt.Sprintf(confWith, 6))
		start := time.Now()
		for _, p := range before {
			c := mcptest.Connect(t, "http://"+p.IP+":8080/mcp", mcptest.Options{Token: token, Name: "toolgate-e2e-cluster"})
			for !slices.Contains(names(t, c), "slow") {
				if time.Since(start) > 150*time.Second {
					t.Fatalf("%s: the edited ConfigMap's tool slow not served after %s", p.Name, time.Since(start))
				}
				time.Sleep(time.Second)
			}
		}
		figure(t, "ConfigMap edit to served in both pods: %.1f s (kubelet sync, then reload)", time.Since(start).Seconds())
		after := k.pods(t)
		if len(after) != 2 || after[0].Name != before[0].Name && after[0].Name != before[1].Name {
			t.Errorf("pods changed for a ConfigMap edit: %v then %v", before, after)
		}
		if rc := k.must(t, "get", "pods", "-l", "app.kubernetes.io/name=toolgate", "-o", "jsonpath={.items[*].status.containerStatuses[0].restartCount}"); strings.Trim(rc, "0 ") != "" {
			t.Errorf("restart counts %q after a ConfigMap edit, want 0", rc)
		}
	})

	t.Run("rollout restart loses no call", func(t *testing.T) {
		underCalls(t, k, token, "kubectl rollout restart", func() {
			k.must(t, "rollout", "restart", "deployment/toolgate")
			k.must(t, "rollout", "status", "deployment/toolgate", "--timeout=180s")
		})
	})

	t.Run("new image tag and ConfigMap lose no call", func(t *testing.T) {
		k.importImage(t, image, "localhost/toolgate:e2e-next")
		underCalls(t, k, token, "new image tag + ConfigMap change", func() {
			k.setConf(t, fmt.Sprintf(confWith, 5))
			k.must(t, "set", "image", "deployment/toolgate", "toolgate=localhost/toolgate:e2e-next")
			k.must(t, "rollout", "status", "deployment/toolgate", "--timeout=180s")
		})
		k.settle(t, 2)
		imgs := k.must(t, "get", "pods", "-l", "app.kubernetes.io/name=toolgate", "-o", "jsonpath={.items[*].spec.containers[0].image}")
		if strings.Count(imgs, "localhost/toolgate:e2e-next") != len(strings.Fields(imgs)) {
			t.Errorf("pods' images after the rollout: %s", imgs)
		}
	})

	t.Run("pod deleted mid-call", func(t *testing.T) {
		podDeletedMidCall(t, k, token)
	})

	t.Run("figures", func(t *testing.T) {
		clusterFigures(t, k, token)
	})
}

// podDeletedMidCall: a call in flight when its pod is deleted finishes
// (the pod drains within --shutdown-grace), and the client's next call
// succeeds on the other replica.
func podDeletedMidCall(t *testing.T, k *kube, token string) {
	hc, _ := k.serviceClient(t)
	c := mcptest.Connect(t, "http://toolgate:8080/mcp", mcptest.Options{Token: token, HTTP: hc, Name: "toolgate-e2e-cluster"})
	// A 2025-11-25 session, minted by the replica ClientIP affinity picks.
	legacy := mcptest.Connect(t, "http://toolgate:8080/mcp", mcptest.Options{Token: token, HTTP: hc, Legacy: true, Name: "toolgate-e2e-cluster"})
	type result struct {
		text string
		err  error
	}
	done := make(chan result, 1)
	// The slow tool (the earlier subtests' ConfigMap edit; set here too).
	k.setConf(t, fmt.Sprintf(confWith, 5))
	for start := time.Now(); !slices.Contains(names(t, c), "slow"); time.Sleep(time.Second) {
		if time.Since(start) > 150*time.Second {
			t.Fatal("the slow tool is not served")
		}
	}
	go func() {
		res, err := call1(c, "slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{text(res), nil}
	}()
	// The pod whose sandbox runs the sleep.
	var victim string
	deadline := time.Now().Add(4 * time.Second)
	for victim == "" && time.Now().Before(deadline) {
		for _, p := range k.pods(t) {
			out, _ := k.run("exec", p.Name, "--", "sh", "-c", "cat /proc/[0-9]*/comm")
			if slices.Contains(strings.Fields(out), "sleep") {
				victim = p.Name
			}
		}
	}
	if victim == "" {
		t.Fatal("no pod runs the slow call")
	}
	k.must(t, "delete", "pod", victim, "--wait=false")
	r := <-done
	if r.err != nil || !strings.Contains(r.text, "exit=0") {
		t.Errorf("the call in flight in the deleted pod %s: %v %q, want it drained to its end", victim, r.err, r.text)
	}
	res, err := call1(c, "git_status")
	if err != nil || !strings.Contains(text(res), "not a git repository") {
		t.Errorf("the next call after deleting %s: %v %q", victim, err, text(res))
	}
	k.must(t, "rollout", "status", "deployment/toolgate", "--timeout=120s")
	// The session died with its replica: the other one does not know it
	// (404), and the client starts a new session there, as the spec says.
	k.settle(t, 2)
	if _, err := call1(legacy, "git_status"); err == nil {
		t.Errorf("a call in the session of the deleted replica %s succeeded, want it refused (unknown session)", victim)
	}
	fresh := mcptest.Connect(t, "http://toolgate:8080/mcp", mcptest.Options{Token: token, HTTP: hc, Legacy: true, Name: "toolgate-e2e-cluster"})
	if res, err := call1(fresh, "git_status"); err != nil || !strings.Contains(text(res), "not a git repository") {
		t.Errorf("a new session after the replica went: %v %q", err, text(res))
	}
}

// clusterFigures measures calls/s and p50/p99 of git_status (a sandboxed
// call) through the Service at 1, 8 and 32 clients against 1 and 2
// replicas, and one pod's RSS at rest.
func clusterFigures(t *testing.T, k *kube, token string) {
	p := k.pods(t)[0]
	st := k.must(t, "exec", p.Name, "--", "cat", "/proc/1/status")
	for line := range strings.SplitSeq(st, "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			figure(t, "pod %s at rest: toolgate %s", p.Name, strings.Join(strings.Fields(line)[1:], " "))
		}
	}
	hc, _ := k.serviceClient(t)
	dur := 5 * time.Second
	for _, replicas := range []int{1, 2} {
		k.must(t, "scale", "deployment/toolgate", fmt.Sprintf("--replicas=%d", replicas))
		k.must(t, "rollout", "status", "deployment/toolgate", "--timeout=120s")
		k.settle(t, replicas)
		pods := k.pods(t)
		for _, n := range []int{1, 8, 32} {
			before := podCalls(t, pods)
			lat, failed := benchService(t, hc, token, n, dur)
			after := podCalls(t, pods)
			var spread []string
			for i := range pods {
				spread = append(spread, fmt.Sprint(after[i]-before[i]))
			}
			if len(lat) == 0 {
				t.Errorf("%d clients, %d replicas: no call answered (%d failed)", n, replicas, failed)
				continue
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			figure(t, "service git_status replicas=%d clients=%2d: %6.1f calls/s p50 %6.1f ms p99 %6.1f ms (%d calls, %d failed; calls per pod %s)",
				replicas, n, float64(len(lat))/dur.Seconds(), q(0.5), q(0.99), len(lat), failed, strings.Join(spread, "/"))
		}
	}
	// ClientIP affinity sends every client of one address to one replica:
	// what two replicas hold for clients of many addresses, by pod IP.
	pods := k.pods(t)
	for _, n := range []int{8, 32} {
		lat, failed := bench(func(i int) string { return "http://" + pods[i%len(pods)].IP + ":8080/mcp" }, hc, token, n, dur)
		if len(lat) == 0 {
			t.Errorf("%d clients over the pod IPs: no call answered (%d failed)", n, failed)
			continue
		}
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		figure(t, "pod IPs  git_status replicas=2 clients=%2d: %6.1f calls/s p50 %6.1f ms p99 %6.1f ms (%d calls, %d failed; clients split over the pods)",
			n, float64(len(lat))/dur.Seconds(), q(0.5), q(0.99), len(lat), failed)
	}
}

func benchService(t *testing.T, hc *http.Client, token string, n int, dur time.Duration) ([]time.Duration, int64) {
	t.Helper()
	return bench(func(int) string { return "http://toolgate:8080/mcp" }, hc, token, n, dur)
}

// bench runs n clients, client i on url(i), for dur, and returns the
// latencies of the calls that answered and the count of those that failed.
func bench(url func(int) string, hc *http.Client, token string, n int, dur time.Duration) ([]time.Duration, int64) {
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(dur)
	for i := range n {
		wg.Go(func() {
			c, err := mcptest.Dial(context.Background(), url(i), mcptest.Options{Token: token, HTTP: hc, Name: fmt.Sprintf("bench-%d", i)})
			if err != nil {
				failed.Add(1)
				return
			}
			defer c.Close()
			var mine []time.Duration
			for time.Now().Before(end) {
				s := time.Now()
				if _, err := call1(c, "git_status"); err != nil {
					failed.Add(1)
					continue
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, failed.Load()
}

// podCalls is each pod's count of git_status calls (its /metrics).
func podCalls(t *testing.T, pods []kubePod) []int64 {
	t.Helper()
	var n []int64
	for _, p := range pods {
		resp, err := http.Get("http://" + p.IP + ":9090/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		io.Copy(&b, resp.Body)
		resp.Body.Close()
		var sum int64
		for line := range strings.SplitSeq(b.String(), "\n") {
			if strings.HasPrefix(line, "toolgate_calls_total{") && strings.Contains(line, `tool="git_status"`) {
				var v float64
				fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
				sum += int64(v)
			}
		}
		n = append(n, sum)
	}
	return n
}
