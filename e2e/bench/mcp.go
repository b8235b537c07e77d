package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// session is one MCP client connected to a server process over stdio.
type session struct {
	c   *client.Client
	cmd *exec.Cmd
	// started is when the server process was started; ready when its
	// initialize answer arrived.
	started, ready time.Time
}

// dial starts argv as an MCP stdio server, its stderr appended to logw,
// and initializes a session.
func dial(argv, env []string, logw io.Writer) (*session, error) {
	s := &session{}
	if logw == nil {
		logw = io.Discard
	}
	t := transport.NewStdioWithOptions(argv[0], env, argv[1:],
		transport.WithCommandStderrWriter(logw),
		transport.WithCommandFunc(func(ctx context.Context, command string, env, args []string) (*exec.Cmd, error) {
			cmd := exec.Command(command, args...)
			cmd.Env = env
			s.cmd = cmd
			return cmd, nil
		}))
	s.started = time.Now()
	if err := t.Start(context.Background()); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	s.c = client.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "toolgate-bench", Version: "1"}
	if _, err := s.c.Initialize(ctx, req); err != nil {
		s.close()
		return nil, fmt.Errorf("initialize %s: %w", argv[0], err)
	}
	s.ready = time.Now()
	return s, nil
}

func (s *session) pid() int { return s.cmd.Process.Pid }

func (s *session) close() {
	_ = s.c.Close()
}

// call calls tool name with args and returns the text, or an error when
// the call failed or answered isError (unless wantError).
func (s *session) call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, string, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	if args != nil {
		req.Params.Arguments = args
	}
	res, err := s.c.CallTool(ctx, req)
	if err != nil {
		return nil, "", err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String(), nil
}

// timedCalls calls tool n times (after warm warm-up calls) and checks each
// answer contains want.
func (s *session) timedCalls(name string, args map[string]any, want string, warm, n int) (sample, error) {
	var d sample
	for i := range warm + n {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		t0 := time.Now()
		res, text, err := s.call(ctx, name, args)
		el := time.Since(t0)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("call %s: %w", name, err)
		}
		if res.IsError || !strings.Contains(text, want) {
			return nil, fmt.Errorf("call %s: isError=%v: %s", name, res.IsError, firstLine(text))
		}
		if i >= warm {
			d = append(d, el)
		}
	}
	return d, nil
}

// logFile opens (appending) the bench's log of server stderr.
func logFile(path string) io.WriteCloser {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nopCloser{io.Discard}
	}
	return f
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
