{{- define "gpureap.name" -}}gpureap-exporter{{- end }}

{{- define "gpureap.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpureap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpureap.labels" -}}
{{ include "gpureap.selectorLabels" . }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: gpureap
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* A file of files/ (a copy of deploy/, kept identical by the deploy tests), or fail naming it. */}}
{{- define "gpureap.file" -}}
{{- $text := .root.Files.Get (printf "files/%s" .name) -}}
{{- if not $text -}}
{{- fail (printf "charts/gpureap/files/%s is missing or empty (a copy of %s)" .name .from) -}}
{{- end -}}
{{- $text -}}
{{- end }}
