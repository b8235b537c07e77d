package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// sample is the durations of one measured path.
type sample []time.Duration

func (s sample) sorted() sample {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// quantile returns the q-quantile (nearest rank) of s.
func (s sample) quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := s.sorted()
	i := int(math.Ceil(q*float64(len(c)))) - 1
	return c[max(0, min(i, len(c)-1))]
}

func (s sample) median() time.Duration { return s.quantile(0.5) }
func (s sample) p99() time.Duration    { return s.quantile(0.99) }

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// Row is one measured path of the per-call table.
type Row struct {
	Group    string  `json:"group"`
	Name     string  `json:"name"`
	Calls    int     `json:"calls"`
	MedianMS float64 `json:"median_ms"`
	P99MS    float64 `json:"p99_ms"`
	// Skipped says why the path was not measured.
	Skipped string `json:"skipped,omitempty"`
	Note    string `json:"note,omitempty"`

	median, p99 time.Duration
}

func newRow(group, name, note string, s sample) Row {
	return Row{
		Group: group, Name: name, Note: note, Calls: len(s),
		MedianMS: ms(s.median()), P99MS: ms(s.p99()), median: s.median(), p99: s.p99(),
	}
}

func skippedRow(group, name string, err error) Row {
	return Row{Group: group, Name: name, Skipped: firstLine(err.Error())}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// Throughput is one concurrency level of one path.
type Throughput struct {
	Path        string  `json:"path"`
	Concurrency int     `json:"concurrency"`
	Calls       int     `json:"calls"`
	CallsPerSec float64 `json:"calls_per_sec"`
	MedianMS    float64 `json:"median_ms"`
	P99MS       float64 `json:"p99_ms"`
	// PeakRSSKiB is the server's peak RSS (VmHWM) when the row ended.
	PeakRSSKiB int64 `json:"server_peak_rss_kib,omitempty"`
	// Pool is how the calls of a pool-on row got their sandbox.
	Pool    *PoolCounts `json:"pool,omitempty"`
	Skipped string      `json:"skipped,omitempty"`
}

// PoolCounts are the calls that released a ready prepared sandbox (Hits)
// or prepared their own on their path because the pool had none ready
// (Misses), from checkpoint_status.
type PoolCounts struct {
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
}

// PoolCost is what a server's prepared sandboxes hold at rest, per
// prepared sandbox (rt.DescendantsCost of the server divided by Prepared).
type PoolCost struct {
	Backend     string  `json:"backend"`
	Prepared    int     `json:"prepared"`
	Processes   float64 `json:"processes_per_sandbox"`
	RSSKiB      float64 `json:"rss_kib_per_sandbox"`
	PSSKiB      float64 `json:"pss_kib_per_sandbox"`
	Cgroups     float64 `json:"cgroups_per_sandbox"`
	ServerOnKiB int64   `json:"server_rss_pool_on_kib"`
	// ServerOffKiB is the same server's RSS with the pool off, whose
	// descendants at rest are DescendantsOff (0: nothing is held).
	ServerOffKiB   int64  `json:"server_rss_pool_off_kib"`
	DescendantsOff int    `json:"descendants_pool_off"`
	Skipped        string `json:"skipped,omitempty"`
}

// Startup is the time from exec to the initialize answer (MedianMS,
// P99MS) and to the answer of the first tools/list sent right after it
// (ListMedianMS, ListP99MS), with a conf of Tools tools and the sandbox
// backend Backend, whose self-test runs beside serving.
type Startup struct {
	Conf         string  `json:"conf"`
	Tools        int     `json:"tools"`
	Backend      string  `json:"backend"`
	Starts       int     `json:"starts"`
	MedianMS     float64 `json:"median_ms"`
	P99MS        float64 `json:"p99_ms"`
	ListMedianMS float64 `json:"list_median_ms"`
	ListP99MS    float64 `json:"list_p99_ms"`
	Skipped      string  `json:"skipped,omitempty"`
}

// Flood is a capped 1 GB flood through one path.
type Flood struct {
	Path        string  `json:"path"`
	Calls       int     `json:"calls"`
	MedianMS    float64 `json:"median_ms"`
	P99MS       float64 `json:"p99_ms"`
	KeptBytes   int64   `json:"kept_bytes"`
	OutputBytes int64   `json:"output_bytes"`
	PeakRSSKiB  int64   `json:"server_peak_rss_kib"`
	// ServerCPUMS is the server's CPU time per call (user + system).
	ServerCPUMS float64 `json:"server_cpu_ms_per_call"`
	Skipped     string  `json:"skipped,omitempty"`
}

// RSS is the server's resident set at points of a long run.
type RSS struct {
	Path      string `json:"path"`
	IdleKiB   int64  `json:"idle_kib"`
	After100  int64  `json:"after_100_kib"`
	After5000 int64  `json:"after_5000_kib"`
	// Calls is how many calls the run made (5,000 unless -rss-calls).
	Calls      int    `json:"calls"`
	PeakKiB    int64  `json:"peak_kib"`
	ThreadsEnd int    `json:"threads_end"`
	FDsEnd     int    `json:"fds_end"`
	Skipped    string `json:"skipped,omitempty"`
}

// Target is one checked target.
type Target struct {
	Name     string `json:"name"`
	Want     string `json:"want"`
	Measured string `json:"measured"`
	Held     bool   `json:"held"`
	// Unmeasured is set when a path the target needs was skipped.
	Unmeasured string `json:"unmeasured,omitempty"`
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
