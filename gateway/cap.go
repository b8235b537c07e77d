package gateway

// Bounding what a downstream server sends, while it is read.
//
// mcp-go's transports read a whole message before anyone can look at its
// size: its stdio transport reads a line with bufio's ReadString, its HTTP
// transport decodes a body or an SSE event whole. A server that writes a
// 1 GB result would cost toolgate gigabytes before capResult could cut it.
// So the streams are bounded before mcp-go sees them: a message longer than
// the bound is never passed on nor kept. It is read and discarded, its
// top-level id picked out on the way (jsonrpc.Scan), and the waiting call
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

	"github.com/toolgate/toolgate/internal/jsonrpc"
)

// envelope is the headroom over --downstream-max-bytes for the
// JSON-RPC envelope of a result: a message may be this much longer than
// the result it carries before it is discarded unread.
const envelope = 64 << 10

// errorBodyMax bounds an HTTP body that carries no MCP message
// (an error status, an unexpected content type): mcp-go reads it whole
// and quotes it in its error.
const errorBodyMax = 64 << 10

// oversizeCode is the JSON-RPC error code of the answer toolgate makes up
// for an oversized message: in the implementation-defined server-error
// range, and one mcp-go passes on with its message.
const oversizeCode = -32099

// messageMax is the longest message (a stdio line, an HTTP body, an SSE
// event) toolgate reads from a downstream server whose results are capped
// at maxBytes: never less than what the default cap allows, so that a
// small cap does not also cut tools/list.
func messageMax(maxBytes int) int {
	return max(maxBytes, DefaultMaxBytes) + envelope
}

// boundedTransport bounds the responses of a streamable-HTTP downstream
// server: an application/json body to max bytes (a longer one is replaced
// by an error answer for its id, or the request fails), each event of a
// text/event-stream body to max bytes (sseCap), and any other body to
// errorBodyMax.
type boundedTransport struct {
	base http.RoundTripper
	max  int
	// over is told of a discarded message; it returns the error answer to
	// put in its place (nil: none).
	over func(jsonrpc.Oversize) []byte
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
		}{io.LimitReader(resp.Body, errorBodyMax), resp.Body}
	case mediaType == "text/event-stream":
		reqID := requestBodyID(r)
		resp.Body = jsonrpc.NewSSECap(resp.Body, t.max, func(o jsonrpc.Oversize) ([]byte, error) {
			if o.ID == nil && !o.Method {
				o.ID = reqID // an event of no readable id on a request's stream answers it
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
		o    jsonrpc.Oversize
		scan jsonrpc.Scan
		body []byte
	)
	if resp.ContentLength > int64(t.max) {
		o.Size = resp.ContentLength
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
		o = jsonrpc.Oversize{Size: int64(len(b)) + n, ID: scan.ID(), Method: scan.HasMethod()}
	}
	resp.Body.Close()
	if o.ID == nil {
		o.ID = requestBodyID(r)
	}
	if body = t.answer(o); body == nil {
		return nil, fmt.Errorf("toolgate: the downstream response was %d bytes, over toolgate's cap of %d bytes for one message", o.Size, t.max)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

func (t *boundedTransport) answer(o jsonrpc.Oversize) []byte {
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
	var s jsonrpc.Scan
	if _, err := io.Copy(&s, body); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	return s.ID()
}
