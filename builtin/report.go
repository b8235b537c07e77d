package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"
)

// Default report paths, by kind.
const (
	DefaultAuditReport  = "ISSUES.md"
	DefaultReviewReport = "REVIEW.md"
	DefaultSARIFReport  = "ISSUES.sarif"
)

// ErrDisclosure is a read of a hidden or likely-secret path, which the
// read tools refuse as the collector skips them.
var ErrDisclosure = errors.New("hidden or likely-secret path")

// checkDisclosure refuses paths the collector would never disclose: a
// hidden component or a likely-secret file name.
func checkDisclosure(rel string) error {
	for part := range strings.SplitSeq(rel, "/") {
		if part == "." {
			continue
		}
		if strings.HasPrefix(part, ".") || isSecretName(part) {
			return fmt.Errorf("component %q: %w", part, ErrDisclosure)
		}
	}
	return nil
}

// resolveReadable resolves an input path for a read tool and applies the
// disclosure rule to what was asked for and to what it resolves to.
func (e *env) resolveReadable(p string) (string, error) {
	rel, err := e.ws.Resolve(p)
	if err != nil {
		return "", err
	}
	if lex, lerr := e.ws.lexicalRel(p); lerr == nil {
		if err := checkDisclosure(lex); err != nil {
			return "", fmt.Errorf("path %q: %w", p, err)
		}
	}
	if err := checkDisclosure(rel); err != nil {
		return "", fmt.Errorf("path %q: resolves to %q: %w", p, rel, err)
	}
	return rel, nil
}

// ExistingReport is existing_report's structured result.
type ExistingReport struct {
	Path        string `json:"path"`
	Exists      bool   `json:"exists"`
	Bytes       int64  `json:"bytes"`
	Text        string `json:"text"`
	TextBytes   int    `json:"text_bytes"`
	TextSHA256  string `json:"text_sha256"`
	Cut         bool   `json:"cut"`
	BudgetBytes int    `json:"budget_bytes"`
}

type existingReportArgs struct {
	Path *string `json:"path"`
	Kind *string `json:"kind"`
}

var existingReportInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "kind": {"type": "string", "enum": ["audit", "review"], "description": "which default report to read: audit (ISSUES.md) or review (REVIEW.md); default audit"},
    "path": {"type": "string", "description": "the report to read instead of the default: workspace-relative, or absolute inside the workspace; not together with kind"}
  },
  "additionalProperties": false
}`)

var existingReportOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "exists": {"type": "boolean", "description": "false when there is no earlier report: nothing to carry forward"},
    "bytes": {"type": "integer", "description": "the file's size"},
    "text": {"type": "string"},
    "text_bytes": {"type": "integer"},
    "text_sha256": {"type": "string"},
    "cut": {"type": "boolean", "description": "the report is longer than the budget; text ends at the last complete line that fits"},
    "budget_bytes": {"type": "integer"}
  },
  "required": ["path", "exists", "bytes", "text", "text_bytes", "text_sha256", "cut", "budget_bytes"],
  "additionalProperties": false
}`)

// reportTextBudget leaves room in the budget for the cut marker.
const reportTextBudget = BudgetReport - 1024

func existingReportTool(e *env) Tool {
	return Tool{
		Name:  "existing_report",
		Group: GroupReport,
		Description: "Read an earlier audit or review report for carry-forward comparison: ISSUES.md (kind audit, the " +
			"default) or REVIEW.md (kind review) at the workspace root, or another path inside the workspace " +
			"(relative, or absolute inside it; no \"..\", no symlink leading out, no hidden or likely-secret file). " +
			"A missing report is not an error: exists is false. " +
			fmt.Sprintf("Byte budget: %d bytes of text and of structured content each (text counted raw); a longer "+
				"report is cut at the last complete line (cut: true).", BudgetReport),
		InputSchema:  existingReportInputSchema,
		OutputSchema: existingReportOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a existingReportArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("existing_report: %v", err), nil
			}
			p := DefaultAuditReport
			switch {
			case a.Path != nil && a.Kind != nil:
				return Errorf("existing_report: give path or kind, not both"), nil
			case a.Path != nil:
				p = *a.Path
			case a.Kind != nil && *a.Kind == "review":
				p = DefaultReviewReport
			case a.Kind != nil && *a.Kind != "audit":
				return Errorf("existing_report: kind %q: want audit or review", *a.Kind), nil
			}
			return e.existingReport(p), nil
		},
	}
}

func (e *env) existingReport(p string) Result {
	r := ExistingReport{Path: p, BudgetBytes: BudgetReport}
	rel, err := e.resolveReadable(p)
	if errors.Is(err, fs.ErrNotExist) {
		if lex, lerr := e.ws.lexicalRel(p); lerr == nil {
			r.Path = lex
		}
		empty := sha256.Sum256(nil)
		r.TextSHA256 = hex.EncodeToString(empty[:])
		return Result{Text: fmt.Sprintf("existing_report: no report at %s: nothing to carry forward\n", r.Path), Structured: r}
	}
	if err != nil {
		return Errorf("existing_report: %v", err)
	}
	r.Path = rel
	data, size, cut, err := e.ws.ReadFile(rel, reportTextBudget)
	if err != nil {
		return Errorf("existing_report: %v", err)
	}
	if cut {
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		}
		// A cut inside a very long line may split a rune.
		for i := 0; i < utf8.UTFMax && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) {
		return Errorf("existing_report: %q is not UTF-8 text", rel)
	}
	r.Exists, r.Bytes, r.Cut = true, size, cut
	r.Text, r.TextBytes = string(data), len(data)
	sum := sha256.Sum256(data)
	r.TextSHA256 = hex.EncodeToString(sum[:])
	text := r.Text
	if cut {
		text += fmt.Sprintf("\n[cut: showed %d of %d bytes of %s to stay within %d bytes]\n", r.TextBytes, r.Bytes, path.Clean(rel), BudgetReport)
	}
	return Result{Text: text, Structured: r}
}
