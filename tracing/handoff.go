package tracing

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// handoffBatches is how many batches wait for the exporter: with the SDK's
// default batch of 512 spans, 4096 spans, about two seconds of calls at
// 500 calls a second with four spans each.
const handoffBatches = 8

// handoff is the span exporter the SDK's batch processor exports to: it
// takes a batch at once (a copy: the processor reuses its slice) onto a
// bounded queue that one goroutine exports to the OTLP exporter, and
// drops (and counts) a batch when the queue is full. The batch processor
// exports one batch at a time and waits for it, so without the hand-off a
// collector that is slow or unreachable (the OTLP exporter retries for up
// to its timeout) would fill the processor's queue, whose drops the SDK
// does not count anywhere a server can read.
type handoff struct {
	exp   sdktrace.SpanExporter
	queue chan []sdktrace.ReadOnlySpan
	done  chan struct{}

	mu     sync.RWMutex // guards closed against sends
	closed bool

	exported, droppedFull, droppedFailed atomic.Uint64
}

func newHandoff(exp sdktrace.SpanExporter, batches int) *handoff {
	h := &handoff{exp: exp, queue: make(chan []sdktrace.ReadOnlySpan, batches), done: make(chan struct{})}
	go h.run()
	return h
}

func (h *handoff) run() {
	defer close(h.done)
	for batch := range h.queue {
		// The OTLP exporter bounds each export by its own timeout
		// (OTEL_EXPORTER_OTLP_TIMEOUT, retries included).
		if err := h.exp.ExportSpans(context.Background(), batch); err != nil {
			h.droppedFailed.Add(uint64(len(batch)))
			continue
		}
		h.exported.Add(uint64(len(batch)))
	}
}

// ExportSpans queues spans for export, or drops them when the queue is
// full; it never waits.
func (h *handoff) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		h.droppedFull.Add(uint64(len(spans)))
		return nil
	}
	select {
	case h.queue <- slices.Clone(spans):
	default:
		h.droppedFull.Add(uint64(len(spans)))
	}
	return nil
}

// Shutdown exports what is queued, within ctx, then shuts the exporter
// down.
func (h *handoff) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.queue)
	}
	h.mu.Unlock()
	select {
	case <-h.done:
	case <-ctx.Done():
	}
	return h.exp.Shutdown(ctx)
}

func (h *handoff) stats() Stats {
	return Stats{Exported: h.exported.Load(), DroppedFull: h.droppedFull.Load(), DroppedFailed: h.droppedFailed.Load()}
}
