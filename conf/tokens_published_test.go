package conf

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var digestRe = regexp.MustCompile(`sha256:([0-9a-fA-F]{64})\b`)

// TestPublishedTokensListed: every token the README, docs/ and deploy/
// show (a sha256:HEX digest anywhere, or a line of a code block that
// reads as a token file's NAME TOKEN) is in publishedTokens, so that
// toolgate refuses a token file that copies it.
func TestPublishedTokensListed(t *testing.T) {
	files := []string{"../README.md"}
	for _, dir := range []string{"../docs", "../deploy"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".go") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	shown := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check := func(line int, what string, digest [sha256.Size]byte) {
			shown++
			if _, ok := PublishedToken(digest); !ok {
				t.Errorf("%s:%d shows %s that publishedTokens lacks: add its digest %x", f, line, what, digest)
			}
		}
		inCode := !strings.HasSuffix(f, ".md") // a manifest is all code
		for i, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				inCode = !inCode
				continue
			}
			for _, m := range digestRe.FindAllStringSubmatch(l, -1) {
				var d [sha256.Size]byte
				hex.Decode(d[:], []byte(strings.ToLower(m[1])))
				check(i+1, "a token digest", d)
			}
			if !inCode {
				continue
			}
			// A token file's line, alone or as a YAML or shell value.
			for _, c := range []string{l, after(l, ": "), after(l, "=")} {
				fields := tokenFields(strings.Trim(strings.TrimSpace(c), `'"`))
				if len(fields) >= 2 && tokenNameRe.MatchString(fields[0]) &&
					len(fields[1]) >= MinTokenLength && tokenRe.MatchString(fields[1]) && !strings.Contains(fields[1], "/") {
					check(i+1, "a token", sha256.Sum256([]byte(fields[1])))
				}
			}
		}
	}
	t.Logf("%d tokens or digests shown in %d files", shown, len(files))
}

// after returns what follows the last sep in l ("" without one).
func after(l, sep string) string {
	if i := strings.LastIndex(l, sep); i >= 0 {
		return l[i+len(sep):]
	}
	return ""
}

// TestPublishedTokenDigests: the list holds digests, each 64 hex digits,
// and says where each was published.
func TestPublishedTokenDigests(t *testing.T) {
	for d, where := range publishedTokens {
		if b, err := hex.DecodeString(d); err != nil || len(b) != sha256.Size || strings.ToLower(d) != d || where == "" {
			t.Errorf("publishedTokens[%q] = %q: want a lowercase hex SHA-256 and where it was published", d, where)
		}
	}
	if where, ok := PublishedToken(sha256.Sum256([]byte("example-token-replace-me-0123456789abcdef"))); !ok || !strings.Contains(where, "secret.yaml") {
		t.Errorf("PublishedToken(the shipped example) = %q, %v; want it listed", where, ok)
	}
	if _, ok := PublishedToken(sha256.Sum256([]byte(tok32))); ok {
		t.Errorf("PublishedToken(a token of one's own) = true")
	}
}
