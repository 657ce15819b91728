{{/*
The lab's scenario table, files/scenarios.json (`gpureap lab --print-scenarios`),
is the only source of what a pod runs: PID 1's command, the grace, the preStop
hook, the worker command. values.yaml only switches scenarios on and off and
says where the images and the GPU nodes are.
*/}}

{{- define "gpu-zombie-test.labels" -}}
app: gpu-zombie-test
app.kubernetes.io/name: gpu-zombie-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* One scenario of files/scenarios.json as JSON text, by id; fails naming the id. */}}
{{- define "gpu-zombie-test.scenario" -}}
{{- $doc := .root.Files.Get "files/scenarios.json" | fromJson -}}
{{- if ne (toString $doc.schema) "1" -}}
{{- fail "charts/gpu-zombie-test/files/scenarios.json: schema is not 1 (regenerate it with `gpureap lab --print-scenarios`)" -}}
{{- end -}}
{{- $found := dict -}}
{{- range $doc.scenarios -}}
{{- if eq .id $.id }}{{ $_ := set $found "s" . }}{{ end -}}
{{- end -}}
{{- if not $found.s -}}
{{- fail (printf "charts/gpu-zombie-test/files/scenarios.json: no scenario %s" .id) -}}
{{- end -}}
{{- toJson $found.s -}}
{{- end }}

{{/* Whole seconds from the table, or fail naming the scenario and the field. */}}
{{- define "gpu-zombie-test.seconds" -}}
{{- if ne (float64 (int .value)) (float64 .value) -}}
{{- fail (printf "files/scenarios.json: %s's %s is %v, not whole seconds" .id .field .value) -}}
{{- end -}}
{{- int .value -}}
{{- end }}

{{/*
One scenario's pod: (dict "root" $ "id" "S1"). Named and placed as the lab
names and places it (pod gpu-zombie-<slug>, container "worker").
*/}}
{{- define "gpu-zombie-test.pod" -}}
{{- $root := .root -}}
{{- $s := include "gpu-zombie-test.scenario" . | fromJson -}}
{{- $key := $s.slug | camelcase | untitle -}}
{{- $v := index $root.Values.scenarios $key -}}
{{- if not $v -}}
{{- fail (printf "values: scenarios.%s (scenario %s) is missing" $key $s.id) -}}
{{- end -}}
{{- if $v.enabled }}
apiVersion: v1
kind: Pod
metadata:
  name: {{ $s.pod }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpu-zombie-test.labels" $root | nindent 4 }}
    scenario: {{ $s.slug }}
    gpureap.io/scenario: {{ $s.id }}
  annotations:
    gpureap.io/title: {{ $s.title | quote }}
    gpureap.io/worker: {{ $s.worker }}
    # What the plan's operator execs in the pod to start the experiment
    # (kubectl exec <pod> -- <argv>): the lab's own command.
    gpureap.io/worker-argv: {{ toJson $s.worker_argv | quote }}
spec:
  {{- with $root.Values.node.name }}
  nodeName: {{ . }}
  {{- end }}
  {{- with $root.Values.node.selector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  restartPolicy: Never
  terminationGracePeriodSeconds: {{ include "gpu-zombie-test.seconds" (dict "id" $s.id "field" "termination_grace_period_seconds" "value" $s.termination_grace_period_seconds) }}
  {{- with $root.Values.image.pullSecret }}
  imagePullSecrets:
    - name: {{ . }}
  {{- end }}
  containers:
    - name: {{ $s.container }}
      image: {{ printf "%s:%s" $root.Values.image.repository $s.image_tag | quote }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      # PID 1: the image's ENTRYPOINT + CMD as the lab runs it.
      command:
        {{- toYaml $s.pid1_argv | nindent 8 }}
      env:
        - name: NVIDIA_DRIVER_CAPABILITIES
          value: {{ $root.Values.gpu.driverCapabilities | quote }}
      resources:
        limits:
          {{ $root.Values.gpu.resource }}: {{ int $s.min_gpus }}
      {{- with $s.prestop }}
      lifecycle:
        preStop:
          exec:
            command:
              {{- toYaml .argv | nindent 14 }}
      {{- end }}
{{- end }}
{{- end }}
