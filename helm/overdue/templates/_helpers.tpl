{{/* Names and labels, as `helm create` makes them. */}}

{{- define "overdue.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "overdue.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "overdue.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "overdue.labels" -}}
helm.sh/chart: {{ include "overdue.chart" . }}
{{ include "overdue.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "overdue.selectorLabels" -}}
app.kubernetes.io/name: {{ include "overdue.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "overdue.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "overdue.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "overdue.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where things are mounted in the container. */}}
{{- define "overdue.configDir" -}}/etc/overdue/config{{- end }}
{{- define "overdue.secretsDir" -}}/etc/overdue/secrets{{- end }}
{{- define "overdue.dataDir" -}}/var/lib/overdue{{- end }}

{{- define "overdue.isPostgres" -}}
{{- if eq .Values.database.type "postgres" }}true{{ end }}
{{- end }}

{{- define "overdue.claimName" -}}
{{- default (printf "%s-data" (include "overdue.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{/*
Every Secret the pod mounts, once each, in a stable order: the database URL's,
the metrics token's and `secretMounts`. Returned as a JSON list of names.
*/}}
{{- define "overdue.secretNames" -}}
{{- $names := list }}
{{- if and (include "overdue.isPostgres" .) .Values.database.postgres.urlSecret.name }}
{{- $names = append $names .Values.database.postgres.urlSecret.name }}
{{- end }}
{{- if .Values.metrics.tokenSecret.name }}
{{- $names = append $names .Values.metrics.tokenSecret.name }}
{{- end }}
{{- range .Values.secretMounts }}
{{- $names = append $names . }}
{{- end }}
{{- $names | uniq | toJson }}
{{- end }}

{{/* Seconds Kubernetes waits for the pod to stop before it kills it. */}}
{{- define "overdue.terminationGracePeriodSeconds" -}}
{{- $needed := add .Values.preStopSleepSeconds .Values.shutdownTimeoutSeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $needed 15 }}
{{- else if le (int64 .Values.terminationGracePeriodSeconds) (int64 $needed) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be larger than preStopSleepSeconds + shutdownTimeoutSeconds (%v), or Kubernetes kills overdue in the middle of its graceful shutdown" .Values.terminationGracePeriodSeconds $needed) }}
{{- else }}
{{- int64 .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The public URL: config.base_url, else the first Ingress host. */}}
{{- define "overdue.baseUrl" -}}
{{- if .Values.config.base_url }}
{{- .Values.config.base_url }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- $host := (first .Values.ingress.hosts).host }}
{{- $tls := false }}
{{- range .Values.ingress.tls }}{{ if has $host .hosts }}{{ $tls = true }}{{ end }}{{ end }}
{{- printf "%s://%s" (ternary "https" "http" $tls) $host }}
{{- end }}
{{- end }}

{{/*
The config file's settings: the `config` value plus what the chart decides
itself (listen address, database, shutdown bound, metrics listener and token).
*/}}
{{- define "overdue.settings" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%v" (int64 .Values.containerPort)) }}
{{- if include "overdue.isPostgres" . }}
{{- $s := .Values.database.postgres.urlSecret }}
{{- $_ := set $cfg "database_url_file" (printf "%s/%s/%s" (include "overdue.secretsDir" .) $s.name $s.key) }}
{{- else }}
{{- $_ := set $cfg "database_url" (printf "sqlite://%s/overdue.db" (include "overdue.dataDir" .)) }}
{{- end }}
{{- $_ := set $cfg "shutdown_timeout" (printf "%ds" (int64 .Values.shutdownTimeoutSeconds)) }}
{{- with include "overdue.baseUrl" . }}
{{- $_ := set $cfg "base_url" . }}
{{- end }}
{{- $metrics := default (dict) $cfg.metrics }}
{{- if not (kindIs "invalid" .Values.metrics.port) }}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%v" (int64 .Values.metrics.port)) }}
{{- end }}
{{- with .Values.metrics.tokenSecret }}
{{- if .name }}
{{- $_ := set $metrics "token_file" (printf "%s/%s/%s" (include "overdue.secretsDir" $) .name .key) }}
{{- end }}
{{- end }}
{{- if $metrics }}
{{- $_ := set $cfg "metrics" $metrics }}
{{- end }}
{{- toJson $cfg }}
{{- end }}

{{/*
TOML writer. Helm's toToml turns every number into a float (port = 2525.0),
which overdue rightly refuses, so the config file is written here: integral
numbers as integers, strings through toJson (a JSON string is a valid TOML
basic string), tables inline, and keys whose value is null left out.
*/}}
{{- define "overdue.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "overdue.toml.value" -}}
{{- $v := . }}
{{- if kindIs "string" $v }}{{ toJson $v }}
{{- else if kindIs "bool" $v }}{{ $v }}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) }}{{ $v }}
{{- else if kindIs "float64" $v }}
{{- if eq (float64 (int64 $v)) $v }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if kindIs "slice" $v }}[
{{- range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "overdue.toml.value" $e }}{{ end -}}
]
{{- else if kindIs "map" $v }}{
{{- $first := true }}
{{- range $k, $e := $v }}{{ if not (kindIs "invalid" $e) }}
{{- if not $first }},{{ end }} {{ include "overdue.toml.key" $k }} = {{ include "overdue.toml.value" $e }}
{{- $first = false }}{{ end }}{{ end }} }
{{- else }}{{ fail (printf "config: cannot write %v (%s) in TOML" $v (kindOf $v)) }}
{{- end }}
{{- end }}

{{/* One `key = value` line; arrays of tables get one table per line. */}}
{{- define "overdue.toml.line" -}}
{{- $k := index . 0 }}{{ $v := index . 1 }}
{{- if and (kindIs "slice" $v) $v (kindIs "map" (first $v)) }}
{{- include "overdue.toml.key" $k }} = [
{{- range $v }}
  {{ include "overdue.toml.value" . }},
{{- end }}
]
{{- else }}
{{- include "overdue.toml.key" $k }} = {{ include "overdue.toml.value" $v }}
{{- end }}
{{- end }}

{{/* A whole file: top-level keys first, then one [section] per table. */}}
{{- define "overdue.toml" -}}
{{- $cfg := . }}
{{- range $k, $v := $cfg }}
{{- if not (or (kindIs "invalid" $v) (kindIs "map" $v)) }}
{{ include "overdue.toml.line" (list $k $v) }}
{{- end }}
{{- end }}
{{- range $k, $v := $cfg }}
{{- if kindIs "map" $v }}

[{{ include "overdue.toml.key" $k }}]
{{- range $k2, $v2 := $v }}
{{- if not (kindIs "invalid" $v2) }}
{{ include "overdue.toml.line" (list $k2 $v2) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
