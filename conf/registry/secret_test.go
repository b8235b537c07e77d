package registry

import (
	"strings"
	"testing"
)

func TestCredentialName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"GITHUB_TOKEN", true},
		{"github-token", true},
		{"X-Auth-Token", true},
		{"ACCESSTOKEN", true},
		{"OPENAI_API_KEY", true},
		{"X-Api-Key", true},
		{"APIKEY", true},
		{"SSH_KEY", true},
		{"DB_PASSWORD", true},
		{"PGPASSWORD", true},
		{"MY_SECRET_THING", true},
		{"client_secret", true},
		{"AUTHORIZATION", true},
		{"Proxy-Authorization", true},
		{"Cookie", true},
		{"SESSION_COOKIE", true},
		{"GITHUB_PAT", true},
		{"HTTP_AUTH", true},
		{"GPG_PASSPHRASE", true},
		{"AWS_CREDENTIALS", true},
		{"TOKENIZERS_PARALLELISM", false},
		{"KEYBOARD", false},
		{"MONKEY", false},
		{"PWD", false},
		{"LOG_LEVEL", false},
		{"AUTHOR", false},
		{"X-Client", false},
		{"PATH", false},
		{"KEY_ID_HINT", false},
		{"", false},
		{"_", false},
	} {
		if _, got := credentialName(tc.name); got != tc.want {
			t.Errorf("credentialName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCredentialValue(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{fakeOpenAIKey, true},
		{fakeGitHubPAT, true},
		{fakeSlackBot, true},
		{fakeAWSKeyID, true},
		{fakeRandom32, true},
		{fakeJWT, true},
		{fakeUUID, true},
		{"Bearer x", true},
		{"token abc", true},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nabc", true},
		{"https://u:p@h/", true},
		{"fc-0123456789abcdef0123456789abcdef", true},
		{"da39a3ee5e6b4b0d3255bfef95601890afd80709", true},
		{"", false},
		{"info", false},
		{"en_US.UTF-8", false},
		{"sk-SK", false},
		{"fc-cache", false},
		{"/opt/ida-pro-9.1/plugins/abcdefXYZ0123456789", false},
		{"--max-old-space-size=4096", false},
		{"release-2024-01-15-build", false},
		{"com.example.service.name.with.dots", false},
		{"MyApplicationProductionConfig", false},
		{"https://mcp.example.invalid/mcp?x=1", false},
		{"bearer", false},
		{"FIRECRAWL_API_KEY", false},
		{"IDA_MCP_TOKEN", false},
	} {
		if why, got := credentialValue(tc.value); got != tc.want {
			t.Errorf("credentialValue(%q) = %v (%s), want %v", tc.value, got, why, tc.want)
		}
	}
}

func TestQuoteValueRedacts(t *testing.T) {
	if got := quoteValue(fakeGitHubPAT); got != redactedValue {
		t.Errorf("quoteValue(pat) = %s, want %s", got, redactedValue)
	}
	if got := quoteValue("plain"); got != `"plain"` {
		t.Errorf("quoteValue(plain) = %s", got)
	}
	// A secret pasted as a server id, transport or command is not echoed.
	f := newRegFixture(t)
	for _, text := range []string{
		strings.Replace(regStdio, "ida_pro", `"`+fakeGitHubPAT+`"`, 1),
		strings.Replace(regStdio, `"stdio"`, `"`+fakeGitHubPAT+`"`, 1),
		strings.Replace(regStdio, "@EXE@", fakeGitHubPAT, 1),
		strings.Replace(regStdio, "@EXE@", "/opt/"+fakeGitHubPAT, 1),
	} {
		_, errs := f.parse(text)
		if len(errs) == 0 {
			t.Fatalf("accepted %s", text)
		}
		for _, e := range errs {
			if strings.Contains(e.Error(), fakeGitHubPAT) {
				t.Errorf("error echoes the secret: %s", e)
			}
		}
	}
}
