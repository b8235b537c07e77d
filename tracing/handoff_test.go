package tracing

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// stuckExporter is a collector that never answers until released.
type stuckExporter struct{ release chan struct{} }

func (e stuckExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	<-e.release
	return nil
}

func (stuckExporter) Shutdown(context.Context) error { return nil }

// TestHandoffNeverWaits: with the export stuck, the hand-off takes batches
// until its queue is full, then drops and counts them, at once.
func TestHandoffNeverWaits(t *testing.T) {
	exp := stuckExporter{release: make(chan struct{})}
	h := newHandoff(exp, 2)
	spans := tracetest.SpanStubs{{Name: "a"}, {Name: "b"}}.Snapshots()
	start := time.Now()
	for range 10 {
		if err := h.ExportSpans(context.Background(), spans); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10 exports took %v with the collector stuck", d)
	}
	// One batch in the exporter, two queued, seven dropped.
	if st := h.stats(); st.DroppedFull < 12 || st.DroppedFull > 16 {
		t.Errorf("dropped %d spans, want 14 (give or take the batch in flight)", st.DroppedFull)
	}
	close(exp.release)
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := h.stats(); st.Exported+st.DroppedFull != 20 {
		t.Errorf("Stats = %+v, want every span exported or dropped", st)
	}
}
