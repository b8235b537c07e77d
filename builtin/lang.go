package builtin

import (
	"path"
	"slices"
	"strings"
	"unicode"
)

// languageByExt maps a lower-case file extension to a language name.
var languageByExt = map[string]string{
	".go": "Go", ".rs": "Rust", ".c": "C", ".h": "C", ".cc": "C++", ".cpp": "C++", ".cxx": "C++",
	".hh": "C++", ".hpp": "C++", ".hxx": "C++", ".m": "Objective-C", ".mm": "Objective-C++",
	".java": "Java", ".kt": "Kotlin", ".kts": "Kotlin", ".scala": "Scala", ".groovy": "Groovy",
	".cs": "C#", ".fs": "F#", ".vb": "Visual Basic", ".swift": "Swift", ".dart": "Dart",
	".py": "Python", ".pyi": "Python", ".rb": "Ruby", ".php": "PHP", ".pl": "Perl", ".pm": "Perl",
	".lua": "Lua", ".r": "R", ".jl": "Julia", ".ex": "Elixir", ".exs": "Elixir", ".erl": "Erlang",
	".hs": "Haskell", ".ml": "OCaml", ".mli": "OCaml", ".clj": "Clojure", ".elm": "Elm", ".zig": "Zig",
	".nim": "Nim", ".v": "V", ".sol": "Solidity",
	".js": "JavaScript", ".mjs": "JavaScript", ".cjs": "JavaScript", ".jsx": "JavaScript",
	".ts": "TypeScript", ".mts": "TypeScript", ".cts": "TypeScript", ".tsx": "TypeScript",
	".vue": "Vue", ".svelte": "Svelte", ".html": "HTML", ".htm": "HTML", ".css": "CSS",
	".scss": "SCSS", ".sass": "Sass", ".less": "Less",
	".sh": "Shell", ".bash": "Shell", ".zsh": "Shell", ".fish": "Fish", ".ps1": "PowerShell",
	".sql": "SQL", ".proto": "Protocol Buffers", ".graphql": "GraphQL", ".gql": "GraphQL",
	".json": "JSON", ".yaml": "YAML", ".yml": "YAML", ".toml": "TOML", ".xml": "XML",
	".ini": "INI", ".cfg": "INI", ".conf": "Config", ".md": "Markdown", ".markdown": "Markdown",
	".rst": "reStructuredText", ".adoc": "AsciiDoc", ".txt": "Text", ".tex": "TeX",
	".tf": "HCL", ".hcl": "HCL", ".nix": "Nix", ".cmake": "CMake", ".mk": "Makefile",
	".dockerfile": "Dockerfile", ".txtar": "Text", ".golden": "Text", ".csv": "CSV",
	".s": "Assembly", ".asm": "Assembly", ".mod": "Go Module", ".work": "Go Module",
}

// languageByName maps exact file names.
var languageByName = map[string]string{
	"Makefile": "Makefile", "GNUmakefile": "Makefile", "makefile": "Makefile",
	"Dockerfile": "Dockerfile", "Containerfile": "Dockerfile", "CMakeLists.txt": "CMake",
	"Jenkinsfile": "Groovy", "Rakefile": "Ruby", "Gemfile": "Ruby", "Vagrantfile": "Ruby",
	"BUILD": "Starlark", "BUILD.bazel": "Starlark", "WORKSPACE": "Starlark",
	"LICENSE": "Text", "COPYING": "Text", "NOTICE": "Text", "AUTHORS": "Text",
}

// Language names the language of a file from its name ("Other" when
// unknown).
func Language(p string) string {
	base := path.Base(p)
	if l, ok := languageByName[base]; ok {
		return l
	}
	if l, ok := languageByExt[strings.ToLower(path.Ext(base))]; ok {
		return l
	}
	return "Other"
}

// securityCategories are the security index's categories and the words
// that put a path in them. A word of five letters or more matches inside
// a path word ("credential" matches "credentials"); a shorter word must
// be a whole path word ("db" matches "db/conn.go", not "feedback.go").
var securityCategories = []struct {
	name  string
	words []string
}{
	{"auth", []string{
		"auth", "authn", "authz", "authentication", "authorization", "login", "logout", "session",
		"oauth", "jwt", "password", "passwd", "permission", "rbac", "acl", "sso", "saml", "csrf", "token", "principal",
	}},
	{"crypto", []string{
		"crypto", "cipher", "encrypt", "decrypt", "hmac", "tls", "ssl", "x509", "cert", "certificate",
		"rsa", "aes", "ecdsa", "ed25519", "signature", "signing", "hash", "kdf", "random", "nonce",
	}},
	{"secrets", []string{
		"secret", "secrets", "credential", "credentials", "vault", "keyring", "keystore", "kms",
		"apikey", "dotenv",
	}},
	{"deserialization", []string{
		"serial", "deserialize", "deserialization", "unmarshal", "marshal", "pickle",
		"yaml", "decode", "decoder", "protobuf", "gob", "xml",
	}},
	{"shell", []string{"shell", "exec", "command", "spawn", "subprocess", "popen", "syscall", "bash", "sh"}},
	{"sql", []string{
		"sql", "query", "queries", "database", "db", "migration", "migrations", "orm", "sqlite",
		"postgres", "mysql", "repository",
	}},
}

// pathWords splits a path into lower-case words at non-letters and digits
// and at camelCase boundaries.
func pathWords(p string) []string {
	var words []string
	var cur []rune
	var prev rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range p {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && unicode.IsLower(prev) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
		}
		prev = r
	}
	flush()
	return words
}

// SecurityCategories returns the security index categories a path falls
// in, in index order.
func SecurityCategories(p string) []string {
	words := pathWords(p)
	var out []string
	for _, c := range securityCategories {
		if slices.ContainsFunc(c.words, func(w string) bool { return matchesWord(words, w) }) {
			out = append(out, c.name)
		}
	}
	return out
}

func matchesWord(words []string, w string) bool {
	for _, pw := range words {
		if pw == w || (len(w) >= 5 && strings.Contains(pw, w)) {
			return true
		}
	}
	return false
}
