package server

// Bounding what a downstream server sends, while it is read.
//
// mcp-go's transports read a whole message before anyone can look at its
// size: its stdio transport reads a line with bufio's ReadString, its HTTP
// transport decodes a body or an SSE event whole. A server that writes a
// 1 GB result would cost toolgate gigabytes before capResult could cut it.
// So the streams are bounded before mcp-go sees them: a message longer than
// the bound is never passed on nor kept. It is read and discarded, its
// top-level id picked out on the way (envelopeScan), and the waiting call
// is answered with a JSON-RPC error naming the size and the cap. When the
// id cannot be read, the connection is ended, and the server started
// again on the next call.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
)

// downstreamEnvelope is the headroom over --downstream-max-bytes for the
// JSON-RPC envelope of a result: a message may be this much longer than
// the result it carries before it is discarded unread.
const downstreamEnvelope = 64 << 10

// downstreamErrorBodyMax bounds an HTTP body that carries no MCP message
// (an error status, an unexpected content type): mcp-go reads it whole
// and quotes it in its error.
const downstreamErrorBodyMax = 64 << 10

// oversizeCode is the JSON-RPC error code of the answer toolgate makes up
// for an oversized message: in the implementation-defined server-error
// range, and one mcp-go passes on with its message.
const oversizeCode = -32099

// messageMax is the longest message (a stdio line, an HTTP body, an SSE
// event) toolgate reads from a downstream server whose results are capped
// at maxBytes: never less than what the default cap allows, so that a
// small cap does not also cut tools/list.
func messageMax(maxBytes int) int {
	return max(maxBytes, DefaultDownstreamMaxBytes) + downstreamEnvelope
}

// oversize is what was discarded: the size of the message and what its
// top level said.
type oversize struct {
	size   int64
	id     json.RawMessage // nil when it could not be read
	method bool            // a request or notification of the server
}

// oversizeFunc decides what replaces a discarded message in the stream:
// bytes to pass on instead (an answer for its id), or an error that ends
// the stream.
type oversizeFunc func(oversize) ([]byte, error)

// errorLine is a JSON-RPC error response for id, as one line.
func errorLine(id json.RawMessage, code int, msg string) []byte {
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

// lineCap passes newline-delimited messages from r through, discarding
// every line longer than max bytes (the newline not counted) without
// keeping it: mcp-go sees at most max bytes of such a line, then a newline
// (a line it cannot parse and skips), then whatever over returns. The
// stream is in step again at the next newline.
type lineCap struct {
	r    io.Reader
	max  int64
	over oversizeFunc

	buf    []byte
	lo, hi int
	out    []byte // bytes to hand out before reading on
	err    error  // the read error, once out is drained

	n       int64 // bytes of the current line so far
	discard bool  // the current line is over max
	scan    envelopeScan
}

func newLineCap(r io.Reader, max int, over oversizeFunc) *lineCap {
	return &lineCap{r: r, max: int64(max), over: over, buf: make([]byte, 64<<10)}
}

func (c *lineCap) Read(p []byte) (int, error) {
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
			c.n, c.scan = 0, envelopeScan{}
		}
		return len(seg), nil
	}
}

// finish ends a discarded line: what over returns goes on in its place.
func (c *lineCap) finish() {
	o := oversize{size: c.n, id: c.scan.ID(), method: c.scan.HasMethod()}
	c.n, c.discard, c.scan = 0, false, envelopeScan{}
	out, err := c.over(o)
	c.out = append(c.out, out...)
	if err != nil {
		c.err = err
	}
}

// sseCap is lineCap for a text/event-stream body: it bounds each event
// (its lines up to the blank line that ends it), reading the top-level id
// from the event's data lines. A discarded event reaches mcp-go as the
// part it had, ended at once (an event it cannot parse and skips), then
// whatever over returns, as an event of its own.
type sseCap struct {
	r    io.ReadCloser
	max  int64
	over oversizeFunc

	buf    []byte
	lo, hi int
	out    []byte
	err    error

	n       int64 // bytes of the current event so far
	lineN   int64 // bytes of its current line so far
	discard bool
	scan    envelopeScan

	deciding bool   // reading the start of a line, until it says what field it is
	prefix   []byte // that start
	inData   bool   // the line is a data line: its value goes to scan
	dataSeen bool   // the event had a data line (the next one is joined with "\n")
	hasText  bool   // the line has a byte other than '\r' so far
}

func newSSECap(r io.ReadCloser, max int, over oversizeFunc) *sseCap {
	return &sseCap{r: r, max: int64(max), over: over, buf: make([]byte, 64<<10), deciding: true}
}

func (c *sseCap) Close() error { return c.r.Close() }

func (c *sseCap) Read(p []byte) (int, error) {
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
			c.n, c.scan, c.dataSeen = 0, envelopeScan{}, false
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
func (c *sseCap) line(seg []byte, nl bool) {
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

func (c *sseCap) finish() {
	o := oversize{size: c.n, id: c.scan.ID(), method: c.scan.HasMethod()}
	c.n, c.discard, c.scan, c.dataSeen = 0, false, envelopeScan{}, false
	out, err := c.over(o)
	if out != nil {
		c.out = append(append(append(c.out, "data: "...), bytes.TrimRight(out, "\n")...), "\n\n"...)
	}
	if err != nil {
		c.err = err
	}
}

// boundedTransport bounds the responses of a streamable-HTTP downstream
// server: an application/json body to max bytes (a longer one is replaced
// by an error answer for its id, or the request fails), each event of a
// text/event-stream body to max bytes (sseCap), and any other body to
// downstreamErrorBodyMax.
type boundedTransport struct {
	base http.RoundTripper
	max  int
	// over is told of a discarded message; it returns the error answer to
	// put in its place (nil: none).
	over func(oversize) []byte
}

func (t *boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted,
		mediaType != "application/json" && mediaType != "text/event-stream":
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, downstreamErrorBodyMax), resp.Body}
	case mediaType == "text/event-stream":
		reqID := requestBodyID(r)
		resp.Body = newSSECap(resp.Body, t.max, func(o oversize) ([]byte, error) {
			if o.id == nil && !o.method {
				o.id = reqID // an event of no readable id on a request's stream answers it
			}
			return t.answer(o), nil
		})
	default:
		return t.boundJSON(r, resp)
	}
	return resp, nil
}

// boundJSON reads an application/json body of at most max bytes; a longer
// one is discarded (unread when Content-Length says so) and replaced by
// the error answer for its id, or for the request's.
func (t *boundedTransport) boundJSON(r *http.Request, resp *http.Response) (*http.Response, error) {
	var (
		o    oversize
		scan envelopeScan
		body []byte
	)
	if resp.ContentLength > int64(t.max) {
		o.size = resp.ContentLength
	} else {
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.max)+1))
		if err != nil {
			resp.Body.Close()
			return nil, err
		}
		if len(b) <= t.max {
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return resp, nil
		}
		scan.Write(b)
		n, err := io.Copy(&scan, resp.Body)
		if err != nil {
			resp.Body.Close()
			return nil, err
		}
		o = oversize{size: int64(len(b)) + n, id: scan.ID(), method: scan.HasMethod()}
	}
	resp.Body.Close()
	if o.id == nil {
		o.id = requestBodyID(r)
	}
	if body = t.answer(o); body == nil {
		return nil, fmt.Errorf("toolgate: the downstream response was %d bytes, over toolgate's cap of %d bytes for one message", o.size, t.max)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

func (t *boundedTransport) answer(o oversize) []byte {
	if t.over == nil {
		return nil
	}
	return t.over(o)
}

// requestBodyID reads the id of the JSON-RPC request r carries, nil when
// it has none.
func requestBodyID(r *http.Request) json.RawMessage {
	if r.GetBody == nil {
		return nil
	}
	body, err := r.GetBody()
	if err != nil {
		return nil
	}
	defer body.Close()
	var s envelopeScan
	if _, err := io.Copy(&s, body); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	return s.ID()
}
