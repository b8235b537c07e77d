package jsonrpc

// Bounded readers of newline-delimited JSON-RPC (LineReader, LineCap) and
// of text/event-stream bodies (SSECap): a message longer than the bound is
// never passed on nor kept. It is read and discarded, its top-level id
// picked out on the way (Scan), and reported (LineReader), or replaced by
// what the caller's OversizeFunc returns (an error answer for its id,
// say).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Oversize is what a bounded reader discarded: the size of the message
// and what its top level said.
type Oversize struct {
	Size   int64
	ID     json.RawMessage // nil when it could not be read
	Method bool            // a request or notification (of the peer)
}

// OversizeFunc decides what replaces a discarded message in the stream:
// bytes to pass on instead (an answer for its id), or an error that ends
// the stream.
type OversizeFunc func(Oversize) ([]byte, error)

// ErrorLine is a JSON-RPC error response for id, as one line.
func ErrorLine(id json.RawMessage, code int, msg string) []byte {
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	return append(b, '\n')
}

// LineCap passes newline-delimited messages from r through, discarding
// every line longer than max bytes (the newline not counted) without
// keeping it: the reader sees at most max bytes of such a line, then a newline
// (a line it cannot parse and skips), then whatever over returns. The
// stream is in step again at the next newline.
type LineCap struct {
	r    io.Reader
	max  int64
	over OversizeFunc

	buf    []byte
	lo, hi int
	out    []byte // bytes to hand out before reading on
	err    error  // the read error, once out is drained

	n       int64 // bytes of the current line so far
	discard bool  // the current line is over max
	scan    Scan
}

// NewLineCap bounds the lines of r to max bytes (see LineCap).
func NewLineCap(r io.Reader, max int, over OversizeFunc) *LineCap {
	return &LineCap{r: r, max: int64(max), over: over, buf: make([]byte, 64<<10)}
}

func (c *LineCap) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		}
		if c.lo == c.hi {
			if c.err != nil {
				return 0, c.err
			}
			n, err := c.r.Read(c.buf)
			c.lo, c.hi = 0, n
			if err != nil {
				c.err = err
				if n == 0 && c.discard {
					c.finish() // the stream ended inside the line
				}
			}
			continue
		}
		win := c.buf[c.lo:c.hi]
		seg, nl := win, false
		if i := bytes.IndexByte(win, '\n'); i >= 0 {
			seg, nl = win[:i+1], true
		}
		body := seg
		if nl {
			body = seg[:len(seg)-1]
		}
		if c.discard {
			c.scan.Write(body)
			c.n += int64(len(body))
			c.lo += len(seg)
			if nl {
				c.finish()
			}
			continue
		}
		if c.n+int64(len(body)) > c.max {
			c.discard = true
			if c.n > 0 {
				c.out = []byte{'\n'} // end the part mcp-go has
			}
			continue
		}
		if len(seg) > len(p) {
			seg, body, nl = seg[:len(p)], seg[:len(p)], false
		}
		c.scan.Write(body)
		c.n += int64(len(body))
		c.lo += copy(p, seg)
		if nl {
			c.n, c.scan = 0, Scan{}
		}
		return len(seg), nil
	}
}

// finish ends a discarded line: what over returns goes on in its place.
func (c *LineCap) finish() {
	o := Oversize{Size: c.n, ID: c.scan.ID(), Method: c.scan.HasMethod()}
	c.n, c.discard, c.scan = 0, false, Scan{}
	out, err := c.over(o)
	c.out = append(c.out, out...)
	if err != nil {
		c.err = err
	}
}

// SSECap is LineCap for a text/event-stream body: it bounds each event
// (its lines up to the blank line that ends it), reading the top-level id
// from the event's data lines. A discarded event reaches the reader as the
// part it had, ended at once (an event it cannot parse and skips), then
// whatever over returns, as an event of its own.
type SSECap struct {
	r    io.ReadCloser
	max  int64
	over OversizeFunc

	buf    []byte
	lo, hi int
	out    []byte
	err    error

	n       int64 // bytes of the current event so far
	lineN   int64 // bytes of its current line so far
	discard bool
	scan    Scan

	deciding bool   // reading the start of a line, until it says what field it is
	prefix   []byte // that start
	inData   bool   // the line is a data line: its value goes to scan
	dataSeen bool   // the event had a data line (the next one is joined with "\n")
	hasText  bool   // the line has a byte other than '\r' so far
}

// NewSSECap bounds the events of r to max bytes (see SSECap).
func NewSSECap(r io.ReadCloser, max int, over OversizeFunc) *SSECap {
	return &SSECap{r: r, max: int64(max), over: over, buf: make([]byte, 64<<10), deciding: true}
}

func (c *SSECap) Close() error { return c.r.Close() }

func (c *SSECap) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		}
		if c.lo == c.hi {
			if c.err != nil {
				return 0, c.err
			}
			n, err := c.r.Read(c.buf)
			c.lo, c.hi = 0, n
			if err != nil {
				c.err = err
				if n == 0 && c.discard {
					c.finish()
				}
			}
			continue
		}
		win := c.buf[c.lo:c.hi]
		seg, nl := win, false
		if i := bytes.IndexByte(win, '\n'); i >= 0 {
			seg, nl = win[:i+1], true
		}
		blank := nl && !c.hasText && len(bytes.TrimRight(seg, "\r\n")) == 0
		if !c.discard && !blank && c.n+int64(len(seg)) > c.max {
			c.discard = true
			if c.n > 0 {
				c.out = []byte("\n\n") // end the part mcp-go has
			}
			continue
		}
		if !c.discard && len(seg) > len(p) {
			seg, nl, blank = seg[:len(p)], false, false
		}
		c.line(seg, nl)
		c.lo += len(seg)
		if blank {
			c.n -= c.lineN // a blank line ends the event; it is not part of it
			c.lineN = 0
			if c.discard {
				c.finish()
				continue
			}
			c.n, c.scan, c.dataSeen = 0, Scan{}, false
		} else {
			c.n += int64(len(seg))
			c.lineN += int64(len(seg))
			if nl {
				c.lineN = 0
			}
		}
		if c.discard {
			continue
		}
		return copy(p, seg), nil
	}
}

// line follows the fields of the event's lines, feeding data values to
// scan (joined by "\n", as mcp-go joins them). seg is part of a line,
// ending it when nl.
func (c *SSECap) line(seg []byte, nl bool) {
	body := seg
	if nl {
		body = bytes.TrimRight(seg, "\r\n")
	}
	if len(bytes.Trim(body, "\r")) > 0 {
		c.hasText = true
	}
	if c.deciding {
		take := min(len(body), len("data: ")-len(c.prefix))
		c.prefix = append(c.prefix, body[:take]...)
		body = body[take:]
		if len(c.prefix) < len("data: ") && !nl {
			return
		}
		c.deciding = false
		if v, ok := bytes.CutPrefix(c.prefix, []byte("data:")); ok {
			if c.dataSeen {
				c.scan.Write([]byte{'\n'})
			}
			c.dataSeen, c.inData = true, true
			c.scan.Write(bytes.TrimPrefix(v, []byte(" ")))
		}
	}
	if c.inData {
		c.scan.Write(body)
	}
	if nl {
		c.deciding, c.inData, c.hasText, c.prefix = true, false, false, c.prefix[:0]
	}
}

func (c *SSECap) finish() {
	o := Oversize{Size: c.n, ID: c.scan.ID(), Method: c.scan.HasMethod()}
	c.n, c.discard, c.scan, c.dataSeen = 0, false, Scan{}, false
	out, err := c.over(o)
	if out != nil {
		c.out = append(append(append(c.out, "data: "...), bytes.TrimRight(out, "\n")...), "\n\n"...)
	}
	if err != nil {
		c.err = err
	}
}

// LineReader reads newline-delimited messages from r, each of at most max
// bytes (the newline not counted). A longer line is never kept: it is read
// on to its end (its newline, or the end of the input), scanned for its
// envelope on the way (Scan), and reported as an Oversize.
type LineReader struct {
	r   *bufio.Reader
	max int

	line    []byte // the line being read, at most max bytes and its newline
	discard bool   // the line is over max: read on to its end, keeping nothing
	n       int64  // its bytes so far
	scan    Scan
}

// NewLineReader bounds the lines of r to max bytes (see LineReader).
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line, its newline kept (none when the input ended
// inside it), valid until the next call of Next or Release; or, for a line
// over max, nil and what was discarded. With the last line (or none) it
// returns the error that ended the input.
func (l *LineReader) Next() ([]byte, *Oversize, error) {
	l.line = l.line[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			err = nil // the line goes on
		}
		if !l.discard && len(l.line)+len(bytes.TrimSuffix(chunk, []byte("\n"))) > l.max {
			l.discard = true
			l.discarding(l.line)
			l.line = nil // let a long buffer go
		}
		if l.discard {
			l.discarding(chunk)
		} else {
			l.line = append(l.line, chunk...)
		}
		if err == nil && !bytes.HasSuffix(chunk, []byte("\n")) {
			continue
		}
		if l.discard {
			o := Oversize{Size: l.n, ID: l.scan.ID(), Method: l.scan.HasMethod()}
			l.discard, l.n, l.scan = false, 0, Scan{}
			return nil, &o, err
		}
		return l.line, nil, err
	}
}

// discarding reads part of an over-long line: counted, scanned, dropped.
func (l *LineReader) discarding(b []byte) {
	b = bytes.TrimSuffix(b, []byte("\n"))
	l.n += int64(len(b))
	_, _ = l.scan.Write(b)
}

// Release lets the buffer of a long line go once its caller is done with
// it, so that none is kept between long lines.
func (l *LineReader) Release() {
	if cap(l.line) > 1<<20 {
		l.line = nil
	}
}
