{{/* Names and labels, in the shape `helm create` uses. */}}
{{- define "remote-leader.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "remote-leader.fullname" -}}
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

{{- define "remote-leader.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "remote-leader.selectorLabels" -}}
app.kubernetes.io/name: {{ include "remote-leader.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "remote-leader.labels" -}}
helm.sh/chart: {{ include "remote-leader.chart" . }}
{{ include "remote-leader.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: group-leader
{{- end }}

{{- define "remote-leader.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "remote-leader.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "remote-leader.headlessName" -}}
{{- printf "%s-headless" (include "remote-leader.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/* The name the server's certificate must carry for the exec probe (tls.serverName). */}}
{{- define "remote-leader.tlsServerName" -}}
{{- default (printf "%s.%s.svc" (include "remote-leader.fullname" .) .Release.Namespace) .Values.tls.serverName }}
{{- end }}

{{/* terminationGracePeriodSeconds: strictly longer than the drain (docs/interfaces.md --drain-timeout-s). */}}
{{- define "remote-leader.terminationGracePeriodSeconds" -}}
{{- add (ceil (float64 .Values.server.drainTimeoutS) | int64) (int64 .Values.terminationGraceExtraSeconds) }}
{{- end }}

{{/* Probe kind after resolving "auto": grpc without TLS, exec with TLS. */}}
{{- define "remote-leader.probeKind" -}}
{{- if eq .Values.probes.kind "auto" }}
{{- ternary "exec" "grpc" .Values.tls.enabled }}
{{- else }}
{{- .Values.probes.kind }}
{{- end }}
{{- end }}

{{/*
One probe. Called with (dict "root" $ "probe" .Values.probes.readiness).
grpc: the kubelet's native probe; exec: remote_leader.healthcheck in the container, which
verifies the server's certificate when TLS is on.
*/}}
{{- define "remote-leader.probe" -}}
{{- $root := .root }}
{{- $probe := .probe }}
{{- if eq (include "remote-leader.probeKind" $root) "grpc" }}
grpc:
  port: {{ int64 $root.Values.ports.grpc }}
  service: {{ $probe.service | quote }}
{{- else }}
exec:
  command:
    - python
    - -m
    - remote_leader.healthcheck
    - --service
    - {{ $probe.service | quote }}
    - --timeout
    - {{ $probe.timeoutSeconds | quote }}
    {{- if $root.Values.tls.enabled }}
    - --tls-ca
    - /etc/remote-leader/tls/{{ $root.Values.tls.caKey }}
    - --tls-server-name
    - {{ include "remote-leader.tlsServerName" $root | quote }}
    {{- end }}
{{- end }}
periodSeconds: {{ $probe.periodSeconds }}
timeoutSeconds: {{ $probe.timeoutSeconds }}
failureThreshold: {{ $probe.failureThreshold }}
{{- end }}
