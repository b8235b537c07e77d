package runtime

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestCaptureKeepsWhatWasWrittenAtTheCutoff: when the drain grace cuts a
// stream off (supervise: something outside the call still holds the
// pipe), what the tool wrote before is still the call's output, even
// when the reader had not run yet (a loaded host): cut off by a read
// deadline, it takes what the pipe holds. A stream closed under it, as
// before, lost it (TestManySessions under load: an empty output, exit 0).
func TestCaptureKeepsWhatWasWrittenAtTheCutoff(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // a holder the call cannot reach: no end of file
	want := []byte("test 7\n")
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	// The cutoff comes before the reader has read anything.
	if err := r.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	c := newCapture(4096, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.readFrom(r)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the cut-off reader did not stop")
	}
	out, total, dropped := c.result()
	if !bytes.Equal(out, want) || total != int64(len(want)) || dropped != 0 {
		t.Errorf("kept %q (%d written, %d dropped), want %q", out, total, dropped, want)
	}
}
