package server

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolgate/toolgate/auth"
)

func randomWord(t *testing.T, prefix string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + strings.ToUpper(hex.EncodeToString(b[:]))
}

// series lists the series of c as "name=value,..." label sets with their
// value, sorted.
func series(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	go func() { c.Collect(ch); close(ch) }()
	var out []string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		var kv []string
		for _, l := range d.Label {
			kv = append(kv, l.GetName()+"="+l.GetValue())
		}
		v := d.GetCounter().GetValue() + d.GetGauge().GetValue()
		out = append(out, strings.Join(kv, ",")+" "+strconv.FormatFloat(v, 'g', -1, 64))
	}
	slices.Sort(out)
	return out
}

// TestMetricLabelsBounded: no label takes a value a client chose. 400
// unauthenticated requests with made-up HTTP methods add one series,
// {method="other",code="401"}, not 400; calls of made-up tools and
// requests with made-up Origins add none beyond their closed sets.
func TestMetricLabelsBounded(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))})
	m := f.h.metrics
	for range 400 {
		req, err := http.NewRequest(randomWord(t, "X"), f.url, strings.NewReader(initBody))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%s without a token: %d, want 401", req.Method, resp.StatusCode)
		}
	}
	if got, want := series(t, m.requests), []string{"code=401,method=other 400"}; !slices.Equal(got, want) {
		t.Errorf("toolgate_http_requests_total after 400 made-up methods = %q, want %q", got, want)
	}
	// Known methods keep their name.
	f.post(t, rpcReq{body: initBody})
	f.post(t, rpcReq{token: aliceToken, body: initBody})
	// Made-up tools (a 2026-07-28 client: 400 Invalid params) and Origins
	// (403).
	c := mcpClient(t, f.url, aliceToken, false)
	for range 50 {
		if res, err := callTool(t, c, randomWord(t, "t"), nil); err == nil && !res.IsError {
			t.Fatalf("a made-up tool answered %v", res)
		}
		f.post(t, rpcReq{token: aliceToken, body: initBody, headers: map[string]string{"Origin": "https://" + randomWord(t, "o") + ".example"}})
	}
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want []string
	}{
		{"toolgate_http_requests_total", m.requests, []string{
			"code=200,method=POST 2", // alice's initialize, the client's
			"code=400,method=POST 50",
			"code=401,method=POST 1",
			"code=401,method=other 400",
			"code=403,method=POST 50",
		}},
		{"toolgate_calls_total", m.calls, nil},
		{"toolgate_call_duration_seconds", m.duration, nil},
		{"toolgate_http_auth_failures_total", m.auth, []string{"reason=missing 401", "reason=origin 50"}},
	} {
		if got := series(t, tc.c); !slices.Equal(got, tc.want) {
			t.Errorf("%s = %q, want %q", tc.name, got, tc.want)
		}
	}
}
