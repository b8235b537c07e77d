{{/* The chart's name: app.kubernetes.io/name, the pods' selector. */}}
{{- define "toolgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name, the Service's too (clients reach it by it). It does
not depend on the release's name, so that the default render is
deploy/kubernetes's objects whatever the release is called. */}}
{{- define "toolgate.fullname" -}}
{{- default (include "toolgate.name" .) .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Every object's labels, and the selector: the app's name and nothing else,
as in deploy/kubernetes (Helm's standard labels would make the two differ). */}}
{{- define "toolgate.labels" -}}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
{{- end -}}

{{/* The port of the probes (and of metrics). */}}
{{- define "toolgate.probePort" -}}
{{- if .Values.metrics.enabled }}{{ .Values.metrics.port }}{{ else }}8080{{ end -}}
{{- end -}}

{{/* The arguments of `toolgate serve`, as a YAML list. Built as data and
rendered with toYaml, so that no value can break the document. The image's
entrypoint is `toolgate serve`; these replace its CMD, so they repeat it
(--root, no per-call cgroup limits). */}}
{{- define "toolgate.args" -}}
{{- $v := .Values -}}
{{- if and (not $v.auth.tokenSecret) (not $v.oauth.enabled) -}}
{{- fail "auth.tokenSecret or oauth.enabled is required: toolgate serve refuses MCP over HTTP without authentication" -}}
{{- end -}}
{{- if and $v.oauth.enabled (or (not $v.oauth.issuer) (not $v.oauth.resource)) -}}
{{- fail "oauth.enabled needs oauth.issuer and oauth.resource (this server's URL, the audience its tokens name)" -}}
{{- end -}}
{{- $args := list "--root=/workspace" "--sandbox-pids=0" "--sandbox-memory=0" "--listen=:8080" -}}
{{- if $v.metrics.enabled -}}
{{- $args = append $args (printf "--metrics-listen=:%v" $v.metrics.port) -}}
{{- end -}}
{{- $args = append $args (printf "--allow-host=%s" (include "toolgate.fullname" .)) -}}
{{- range $v.allowHosts -}}
{{- $args = append $args (printf "--allow-host=%s" .) -}}
{{- end -}}
{{- if $v.auth.tokenSecret -}}
{{- $args = append $args "--auth-tokens=/etc/toolgate/auth/tokens" -}}
{{- end -}}
{{- if $v.oauth.enabled -}}
{{- $args = append $args (printf "--oauth-issuer=%s" $v.oauth.issuer) -}}
{{- $args = append $args (printf "--oauth-resource=%s" $v.oauth.resource) -}}
{{- with $v.oauth.jwksURL }}{{ $args = append $args (printf "--oauth-jwks-url=%s" .) }}{{ end -}}
{{- with $v.oauth.algorithms }}{{ $args = append $args (printf "--oauth-algs=%s" .) }}{{ end -}}
{{- end -}}
{{- $args = concat $args (list "--tool-mcp-dir=/etc/toolgate/tool-mcp.d" "--max-concurrent=8" "--max-concurrent-per-principal=4" "--shutdown-grace=20s" "--log-level=info") $v.extraArgs -}}
{{- toYaml $args -}}
{{- end -}}
