package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Renderer input limits.
const (
	MaxFindings       = 1000
	MaxReportBytes    = 1 << 20 // a rendered report
	maxFieldBytes     = 20000   // one free-text field
	maxLineFieldBytes = 300     // one single-line field
)

// The audit severities, most severe first, and the review ones.
var (
	auditSeverities  = []string{"critical", "high", "medium", "low", "info"}
	reviewSeverities = []string{"blocker", "major", "minor", "nit"}
)

// Finding is one audit finding.
type Finding struct {
	ID             string `json:"id,omitempty"`
	Title          string `json:"title"`
	Severity       string `json:"severity"`
	Description    string `json:"description"`
	File           string `json:"file,omitempty"`
	Line           int    `json:"line,omitempty"`
	EndLine        int    `json:"end_line,omitempty"`
	CWE            string `json:"cwe,omitempty"`
	Recommendation string `json:"recommendation,omitempty"`
	Status         string `json:"status,omitempty"`
}

// ReviewComment is one review comment.
type ReviewComment struct {
	Title      string `json:"title"`
	Severity   string `json:"severity"`
	Body       string `json:"body"`
	File       string `json:"file,omitempty"`
	Line       int    `json:"line,omitempty"`
	EndLine    int    `json:"end_line,omitempty"`
	Suggestion string `json:"suggestion,omitempty"`
}

type auditArgs struct {
	Format     *string    `json:"format"`
	OutputPath *string    `json:"output_path"`
	Title      *string    `json:"title"`
	Scope      *string    `json:"scope"`
	Summary    *string    `json:"summary"`
	Findings   *[]Finding `json:"findings"`
}

type reviewArgs struct {
	OutputPath *string          `json:"output_path"`
	Title      *string          `json:"title"`
	Scope      *string          `json:"scope"`
	Summary    *string          `json:"summary"`
	Verdict    *string          `json:"verdict"`
	Comments   *[]ReviewComment `json:"comments"`
}

// Rendered is a renderer's structured result.
type Rendered struct {
	Path       string         `json:"path"`
	Format     string         `json:"format"`
	Bytes      int            `json:"bytes"`
	SHA256     string         `json:"sha256"`
	Items      int            `json:"items"`
	BySeverity map[string]int `json:"by_severity"`
	Replaced   bool           `json:"replaced"`
}

const locationSchema = `
        "file": {"type": "string", "description": "workspace-relative path the item is about"},
        "line": {"type": "integer", "minimum": 1},
        "end_line": {"type": "integer", "minimum": 1},`

var auditInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "format": {"type": "string", "enum": ["markdown", "sarif"], "description": "default markdown"},
    "output_path": {"type": "string", "description": "workspace-relative path to write (no absolute path, no \"..\", no hidden component, not a symlink); .md or .markdown for markdown, .sarif or .json for sarif; default ISSUES.md, or ISSUES.sarif for sarif"},
    "title": {"type": "string", "maxLength": 300, "description": "one line; default \"Security audit\""},
    "scope": {"type": "string", "maxLength": 300, "description": "one line saying what was audited"},
    "summary": {"type": "string", "maxLength": 20000},
    "findings": {"type": "array", "maxItems": 1000, "items": {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", "description": "unique; default F-001, F-002, ... in report order"},
        "title": {"type": "string", "minLength": 1, "maxLength": 300},
        "severity": {"type": "string", "enum": ["critical", "high", "medium", "low", "info"]},
        "description": {"type": "string", "minLength": 1, "maxLength": 20000},` + locationSchema + `
        "cwe": {"type": "string", "pattern": "^CWE-[0-9]{1,6}$"},
        "recommendation": {"type": "string", "maxLength": 20000},
        "status": {"type": "string", "enum": ["new", "existing", "fixed"], "description": "carry-forward status against the earlier report"}},
      "required": ["title", "severity", "description"], "additionalProperties": false}}
  },
  "required": ["findings"],
  "additionalProperties": false
}`)

var reviewInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "output_path": {"type": "string", "description": "workspace-relative .md or .markdown path to write (no absolute path, no \"..\", no hidden component, not a symlink); default REVIEW.md"},
    "title": {"type": "string", "maxLength": 300, "description": "one line; default \"Code review\""},
    "scope": {"type": "string", "maxLength": 300, "description": "one line saying what was reviewed"},
    "summary": {"type": "string", "maxLength": 20000},
    "verdict": {"type": "string", "enum": ["approve", "request_changes", "comment"]},
    "comments": {"type": "array", "maxItems": 1000, "items": {"type": "object", "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 300},
        "severity": {"type": "string", "enum": ["blocker", "major", "minor", "nit"]},
        "body": {"type": "string", "minLength": 1, "maxLength": 20000},` + locationSchema + `
        "suggestion": {"type": "string", "maxLength": 20000}},
      "required": ["title", "severity", "body"], "additionalProperties": false}}
  },
  "required": ["comments"],
  "additionalProperties": false
}`)

var renderedOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "format": {"type": "string", "enum": ["markdown", "sarif"]},
    "bytes": {"type": "integer"},
    "sha256": {"type": "string"},
    "items": {"type": "integer", "description": "findings or comments written"},
    "by_severity": {"type": "object", "additionalProperties": {"type": "integer"}},
    "replaced": {"type": "boolean", "description": "an earlier file at path was replaced"}
  },
  "required": ["path", "format", "bytes", "sha256", "items", "by_severity", "replaced"],
  "additionalProperties": false
}`)

func renderAuditTool(e *env) Tool {
	return Tool{
		Name:   "render_audit_report",
		Group:  GroupReport,
		Writes: true,
		Description: "Write an audit report from findings, as markdown (default ISSUES.md) or SARIF 2.1.0 (default " +
			"ISSUES.sarif). Findings are ordered by severity (critical, high, medium, low, info), then file and " +
			"line; the same input always gives the same bytes. Writes only to a validated workspace-relative path: " +
			"no absolute path, no \"..\", no hidden component, no symlinked ancestor leading out of the workspace, " +
			fmt.Sprintf("no symlink as the file itself; the file is replaced atomically. At most %d findings and %d bytes "+
				"of report. Byte budget of the result: %d bytes.", MaxFindings, MaxReportBytes, BudgetRender),
		InputSchema:  auditInputSchema,
		OutputSchema: renderedOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a auditArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("render_audit_report: %v", err), nil
			}
			return e.renderAudit(a), nil
		},
	}
}

func renderReviewTool(e *env) Tool {
	return Tool{
		Name:   "render_review_report",
		Group:  GroupReport,
		Writes: true,
		Description: "Write a markdown code review report (default REVIEW.md) from review comments, ordered by " +
			"severity (blocker, major, minor, nit), then file and line; the same input always gives the same bytes. " +
			"Writes only to a validated workspace-relative path: no absolute path, no \"..\", no hidden component, " +
			"no symlinked ancestor leading out of the workspace, no symlink as the file itself; the file is replaced " +
			fmt.Sprintf("atomically. At most %d comments and %d bytes of report. Byte budget of the result: %d bytes.",
				MaxFindings, MaxReportBytes, BudgetRender),
		InputSchema:  reviewInputSchema,
		OutputSchema: renderedOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a reviewArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("render_review_report: %v", err), nil
			}
			return e.renderReview(a), nil
		},
	}
}

var (
	idPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	cwePattern = regexp.MustCompile(`^CWE-[0-9]{1,6}$`)
)

// fieldCheck validates one text field. line fields are one line.
func fieldCheck(name, v string, required, line bool) error {
	limit := maxFieldBytes
	if line {
		limit = maxLineFieldBytes
	}
	switch {
	case required && strings.TrimSpace(v) == "":
		return fmt.Errorf("%s: required, must not be empty", name)
	case len(v) > limit:
		return fmt.Errorf("%s: %d bytes, want at most %d", name, len(v), limit)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("%s: contains a NUL byte", name)
	case line && strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("%s: must be one line without control characters", name)
	}
	return nil
}

// checkLocation validates a file reference: a clean workspace-relative
// path (it need not exist: it may name a deleted file) and a line range.
func checkLocation(name, file string, line, end int) error {
	if file != "" {
		if err := fieldCheck(name+".file", file, false, true); err != nil {
			return err
		}
		switch {
		case filepath.IsAbs(file):
			return fmt.Errorf("%s.file %q: %w", name, file, ErrAbsolute)
		case slices.Contains(strings.Split(file, "/"), ".."):
			return fmt.Errorf("%s.file %q: %w", name, file, ErrTraversal)
		case path.Clean(file) != file:
			return fmt.Errorf("%s.file %q: not a clean path (want %q)", name, file, path.Clean(file))
		case strings.Contains(file, "`"):
			return fmt.Errorf("%s.file %q: contains a backquote", name, file)
		}
	}
	switch {
	case line < 0:
		return fmt.Errorf("%s.line %d: want 1 or more", name, line)
	case end < 0:
		return fmt.Errorf("%s.end_line %d: want 1 or more", name, end)
	case line > 0 && file == "":
		return fmt.Errorf("%s.line: needs file", name)
	case end > 0 && line == 0:
		return fmt.Errorf("%s.end_line: needs line", name)
	case end > 0 && end < line:
		return fmt.Errorf("%s.end_line %d: before line %d", name, end, line)
	}
	return nil
}

func location(file string, line, end int) string {
	switch {
	case file == "":
		return ""
	case line == 0:
		return file
	case end > line:
		return fmt.Sprintf("%s:%d-%d", file, line, end)
	}
	return fmt.Sprintf("%s:%d", file, line)
}

// outputPath validates a renderer's output path and its extension.
func (e *env) outputPath(p string, exts []string) (string, error) {
	rel, err := e.ws.ResolveOutput(p)
	if err != nil {
		return "", err
	}
	lower := strings.ToLower(rel)
	if !slices.ContainsFunc(exts, func(x string) bool { return strings.HasSuffix(lower, x) }) {
		return "", fmt.Errorf("output path %q: want a name ending in %s", p, strings.Join(exts, " or "))
	}
	return rel, nil
}

func str(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

func (e *env) renderAudit(a auditArgs) Result {
	const tool = "render_audit_report"
	format := str(a.Format, "markdown")
	var exts []string
	def := DefaultAuditReport
	switch format {
	case "markdown":
		exts = []string{".md", ".markdown"}
	case "sarif":
		exts, def = []string{".sarif", ".json"}, DefaultSARIFReport
	default:
		return Errorf("%s: format %q: want markdown or sarif", tool, format)
	}
	if a.Findings == nil {
		return Errorf("%s: arguments: missing required property %q", tool, "findings")
	}
	findings := slices.Clone(*a.Findings)
	title := str(a.Title, "Security audit")
	if err := errors.Join(fieldCheck("title", title, true, true), fieldCheck("scope", str(a.Scope, ""), false, true),
		fieldCheck("summary", str(a.Summary, ""), false, false)); err != nil {
		return Errorf("%s: %v", tool, err)
	}
	if len(findings) > MaxFindings {
		return Errorf("%s: %d findings, want at most %d", tool, len(findings), MaxFindings)
	}
	ids := map[string]bool{}
	for i, f := range findings {
		name := fmt.Sprintf("findings[%d]", i)
		if err := errors.Join(
			fieldCheck(name+".title", f.Title, true, true),
			fieldCheck(name+".description", f.Description, true, false),
			fieldCheck(name+".recommendation", f.Recommendation, false, false),
			checkLocation(name, f.File, f.Line, f.EndLine)); err != nil {
			return Errorf("%s: %v", tool, err)
		}
		if !slices.Contains(auditSeverities, f.Severity) {
			return Errorf("%s: %s.severity %q: want one of %s", tool, name, f.Severity, strings.Join(auditSeverities, ", "))
		}
		if f.ID != "" {
			if !idPattern.MatchString(f.ID) {
				return Errorf("%s: %s.id %q: want letters, digits, '.', '_' or '-', at most 64", tool, name, f.ID)
			}
			if ids[f.ID] {
				return Errorf("%s: %s.id %q: used twice", tool, name, f.ID)
			}
			ids[f.ID] = true
		}
		if f.CWE != "" && !cwePattern.MatchString(f.CWE) {
			return Errorf("%s: %s.cwe %q: want CWE-<number>", tool, name, f.CWE)
		}
		if f.Status != "" && !slices.Contains([]string{"new", "existing", "fixed"}, f.Status) {
			return Errorf("%s: %s.status %q: want new, existing or fixed", tool, name, f.Status)
		}
	}
	out, err := e.outputPath(str(a.OutputPath, def), exts)
	if err != nil {
		return Errorf("%s: %v", tool, err)
	}
	slices.SortStableFunc(findings, func(x, y Finding) int {
		return compareItems(slices.Index(auditSeverities, x.Severity), x.File, x.Line,
			slices.Index(auditSeverities, y.Severity), y.File, y.Line)
	})
	n := 0
	for i := range findings {
		if findings[i].ID != "" {
			continue
		}
		for {
			n++
			id := fmt.Sprintf("F-%03d", n)
			if !ids[id] {
				findings[i].ID, ids[id] = id, true
				break
			}
		}
	}
	rep := auditReport{Title: title, Scope: str(a.Scope, ""), Summary: str(a.Summary, ""), Findings: findings, Version: e.version}
	var data []byte
	if format == "sarif" {
		data, err = rep.sarif()
		if err != nil {
			return Errorf("%s: %v", tool, err)
		}
	} else {
		data = rep.markdown()
	}
	counts := map[string]int{}
	for _, f := range findings {
		counts[f.Severity]++
	}
	return e.write(tool, out, format, data, len(findings), counts)
}

func (e *env) renderReview(a reviewArgs) Result {
	const tool = "render_review_report"
	if a.Comments == nil {
		return Errorf("%s: arguments: missing required property %q", tool, "comments")
	}
	comments := slices.Clone(*a.Comments)
	title := str(a.Title, "Code review")
	if err := errors.Join(fieldCheck("title", title, true, true), fieldCheck("scope", str(a.Scope, ""), false, true),
		fieldCheck("summary", str(a.Summary, ""), false, false)); err != nil {
		return Errorf("%s: %v", tool, err)
	}
	verdict := str(a.Verdict, "")
	if verdict != "" && !slices.Contains([]string{"approve", "request_changes", "comment"}, verdict) {
		return Errorf("%s: verdict %q: want approve, request_changes or comment", tool, verdict)
	}
	if len(comments) > MaxFindings {
		return Errorf("%s: %d comments, want at most %d", tool, len(comments), MaxFindings)
	}
	for i, c := range comments {
		name := fmt.Sprintf("comments[%d]", i)
		if err := errors.Join(
			fieldCheck(name+".title", c.Title, true, true),
			fieldCheck(name+".body", c.Body, true, false),
			fieldCheck(name+".suggestion", c.Suggestion, false, false),
			checkLocation(name, c.File, c.Line, c.EndLine)); err != nil {
			return Errorf("%s: %v", tool, err)
		}
		if !slices.Contains(reviewSeverities, c.Severity) {
			return Errorf("%s: %s.severity %q: want one of %s", tool, name, c.Severity, strings.Join(reviewSeverities, ", "))
		}
	}
	out, err := e.outputPath(str(a.OutputPath, DefaultReviewReport), []string{".md", ".markdown"})
	if err != nil {
		return Errorf("%s: %v", tool, err)
	}
	slices.SortStableFunc(comments, func(x, y ReviewComment) int {
		return compareItems(slices.Index(reviewSeverities, x.Severity), x.File, x.Line,
			slices.Index(reviewSeverities, y.Severity), y.File, y.Line)
	})
	rep := reviewReport{Title: title, Scope: str(a.Scope, ""), Summary: str(a.Summary, ""), Verdict: verdict, Comments: comments}
	counts := map[string]int{}
	for _, c := range comments {
		counts[c.Severity]++
	}
	return e.write(tool, out, "markdown", rep.markdown(), len(comments), counts)
}

// compareItems orders by severity rank, then file (items without a file
// last), then line.
func compareItems(sx int, fx string, lx int, sy int, fy string, ly int) int {
	if sx != sy {
		return sx - sy
	}
	if fx != fy {
		switch {
		case fx == "":
			return 1
		case fy == "":
			return -1
		}
		return strings.Compare(fx, fy)
	}
	return lx - ly
}

func (e *env) write(tool, rel, format string, data []byte, items int, counts map[string]int) Result {
	if len(data) > MaxReportBytes {
		return Errorf("%s: the report would be %d bytes, want at most %d", tool, len(data), MaxReportBytes)
	}
	replaced, err := e.ws.WriteFile(rel, data)
	if err != nil {
		return Errorf("%s: %v", tool, err)
	}
	sum := sha256.Sum256(data)
	r := Rendered{
		Path: rel, Format: format, Bytes: len(data), SHA256: hex.EncodeToString(sum[:]), Items: items,
		BySeverity: counts, Replaced: replaced,
	}
	verb := "wrote"
	if replaced {
		verb = "replaced"
	}
	return Result{
		Text:       fmt.Sprintf("%s: %s %s (%s, %d bytes, %s, sha256 %s)\n", tool, verb, rel, format, r.Bytes, count(items, "item"), r.SHA256),
		Structured: r,
	}
}

// auditReport is a validated, ordered audit report.
type auditReport struct {
	Title, Scope, Summary string
	Findings              []Finding
	Version               string
}

func (r auditReport) markdown() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", r.Title)
	b.WriteString("<!-- generated by toolgate render_audit_report -->\n\n")
	if r.Scope != "" {
		fmt.Fprintf(&b, "Scope: %s\n\n", r.Scope)
	}
	if s := strings.TrimSpace(r.Summary); s != "" {
		fmt.Fprintf(&b, "%s\n\n", s)
	}
	b.WriteString("## Summary\n\n| Severity | Findings |\n|---|---:|\n")
	for _, s := range auditSeverities {
		n := 0
		for _, f := range r.Findings {
			if f.Severity == s {
				n++
			}
		}
		fmt.Fprintf(&b, "| %s | %d |\n", s, n)
	}
	fmt.Fprintf(&b, "| **total** | **%d** |\n\n## Findings\n\n", len(r.Findings))
	if len(r.Findings) == 0 {
		b.WriteString("No findings.\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "### %s: %s\n\n", f.ID, f.Title)
		fmt.Fprintf(&b, "- Severity: %s\n", f.Severity)
		if loc := location(f.File, f.Line, f.EndLine); loc != "" {
			fmt.Fprintf(&b, "- Location: `%s`\n", loc)
		}
		if f.CWE != "" {
			fmt.Fprintf(&b, "- CWE: %s\n", f.CWE)
		}
		if f.Status != "" {
			fmt.Fprintf(&b, "- Status: %s\n", f.Status)
		}
		fmt.Fprintf(&b, "\n%s\n\n", strings.TrimSpace(f.Description))
		if s := strings.TrimSpace(f.Recommendation); s != "" {
			fmt.Fprintf(&b, "Recommendation: %s\n\n", s)
		}
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}

// SARIF 2.1.0, the subset a report needs.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool    sarifTool     `json:"tool"`
		Results []sarifResult `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name    string      `json:"name"`
		Version string      `json:"version,omitempty"`
		Rules   []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID               string         `json:"id"`
		ShortDescription sarifMessage   `json:"shortDescription"`
		FullDescription  *sarifMessage  `json:"fullDescription,omitempty"`
		Help             *sarifMessage  `json:"help,omitempty"`
		Properties       map[string]any `json:"properties"`
	}
	sarifMessage struct {
		Text string `json:"text"`
	}
	sarifResult struct {
		RuleID     string          `json:"ruleId"`
		RuleIndex  int             `json:"ruleIndex"`
		Level      string          `json:"level"`
		Message    sarifMessage    `json:"message"`
		Locations  []sarifLocation `json:"locations,omitempty"`
		Properties map[string]any  `json:"properties"`
	}
	sarifLocation struct {
		PhysicalLocation sarifPhysical `json:"physicalLocation"`
	}
	sarifPhysical struct {
		ArtifactLocation sarifArtifact `json:"artifactLocation"`
		Region           *sarifRegion  `json:"region,omitempty"`
	}
	sarifArtifact struct {
		URI       string `json:"uri"`
		URIBaseID string `json:"uriBaseId"`
	}
	sarifRegion struct {
		StartLine int `json:"startLine"`
		EndLine   int `json:"endLine,omitempty"`
	}
)

// sarifLevel maps a severity to a SARIF level, and securitySeverity to
// the GitHub code scanning "security-severity" score.
var (
	sarifLevel       = map[string]string{"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "none"}
	securitySeverity = map[string]string{"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0", "info": "0.0"}
)

func (r auditReport) sarif() ([]byte, error) {
	run := sarifRun{
		Tool:    sarifTool{Driver: sarifDriver{Name: "toolgate", Version: r.Version, Rules: []sarifRule{}}},
		Results: []sarifResult{},
	}
	for i, f := range r.Findings {
		tags := []string{"security"}
		if f.CWE != "" {
			tags = append(tags, "external/cwe/"+strings.ToLower(f.CWE))
		}
		rule := sarifRule{
			ID: f.ID, ShortDescription: sarifMessage{Text: f.Title},
			FullDescription: &sarifMessage{Text: strings.TrimSpace(f.Description)},
			Properties:      map[string]any{"security-severity": securitySeverity[f.Severity], "tags": tags},
		}
		if s := strings.TrimSpace(f.Recommendation); s != "" {
			rule.Help = &sarifMessage{Text: s}
		}
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, rule)
		res := sarifResult{
			RuleID: f.ID, RuleIndex: i, Level: sarifLevel[f.Severity],
			Message:    sarifMessage{Text: f.Title + ": " + strings.TrimSpace(f.Description)},
			Properties: map[string]any{"severity": f.Severity},
		}
		if f.Status != "" {
			res.Properties["status"] = f.Status
		}
		if f.File != "" {
			loc := sarifLocation{PhysicalLocation: sarifPhysical{ArtifactLocation: sarifArtifact{
				URI: (&url.URL{Path: f.File}).EscapedPath(), URIBaseID: "%SRCROOT%",
			}}}
			if f.Line > 0 {
				loc.PhysicalLocation.Region = &sarifRegion{StartLine: f.Line, EndLine: f.EndLine}
			}
			res.Locations = []sarifLocation{loc}
		}
		run.Results = append(run.Results, res)
	}
	log := sarifLog{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}}
	b, err := json.MarshalIndent(log, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode SARIF: %w", err)
	}
	return append(b, '\n'), nil
}

// reviewReport is a validated, ordered review report.
type reviewReport struct {
	Title, Scope, Summary, Verdict string
	Comments                       []ReviewComment
}

var verdictText = map[string]string{"approve": "approve", "request_changes": "changes requested", "comment": "comment only"}

func (r reviewReport) markdown() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", r.Title)
	b.WriteString("<!-- generated by toolgate render_review_report -->\n\n")
	if r.Scope != "" {
		fmt.Fprintf(&b, "Scope: %s\n\n", r.Scope)
	}
	if r.Verdict != "" {
		fmt.Fprintf(&b, "Verdict: %s\n\n", verdictText[r.Verdict])
	}
	if s := strings.TrimSpace(r.Summary); s != "" {
		fmt.Fprintf(&b, "%s\n\n", s)
	}
	b.WriteString("## Summary\n\n| Severity | Comments |\n|---|---:|\n")
	for _, s := range reviewSeverities {
		n := 0
		for _, c := range r.Comments {
			if c.Severity == s {
				n++
			}
		}
		fmt.Fprintf(&b, "| %s | %d |\n", s, n)
	}
	fmt.Fprintf(&b, "| **total** | **%d** |\n\n## Comments\n\n", len(r.Comments))
	if len(r.Comments) == 0 {
		b.WriteString("No comments.\n")
	}
	for i, c := range r.Comments {
		fmt.Fprintf(&b, "### %d. [%s] %s\n\n", i+1, c.Severity, c.Title)
		if loc := location(c.File, c.Line, c.EndLine); loc != "" {
			fmt.Fprintf(&b, "Location: `%s`\n\n", loc)
		}
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(c.Body))
		if s := strings.TrimRight(c.Suggestion, "\n"); strings.TrimSpace(s) != "" {
			fence := "```"
			for strings.Contains(s, fence) {
				fence += "`"
			}
			fmt.Fprintf(&b, "Suggestion:\n\n%s\n%s\n%s\n\n", fence, s, fence)
		}
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}
