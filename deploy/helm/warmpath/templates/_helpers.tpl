{{/* The chart's name, at most 63 characters. */}}
{{- define "warmpath.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: the release name when it contains
the chart's name (helm install warmpath ... gives deploy/'s names), else
RELEASE-warmpath.
*/}}
{{- define "warmpath.fullname" -}}
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

{{/* fullname with a suffix, within a DNS label's 63 characters. */}}
{{- define "warmpath.suffixed" -}}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "warmpath.fullname" (index . 0) | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{- define "warmpath.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warmpath.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "warmpath.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "warmpath.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "warmpath.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "warmpath.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The workers' namespace: discovery.namespace or the release's. */}}
{{- define "warmpath.discoveryNamespace" -}}
{{- default .Release.Namespace .Values.discovery.namespace }}
{{- end }}

{{/* "true" when the replicas share their ledgers (peers). */}}
{{- define "warmpath.peers" -}}
{{- if and .Values.peers.enabled (gt (int .Values.replicas) 1) }}true{{ end }}
{{- end }}

{{/* The headless Service whose A records are the replicas. */}}
{{- define "warmpath.peersService" -}}
{{- if .Values.service.headless }}
{{- include "warmpath.fullname" . }}
{{- else }}
{{- include "warmpath.suffixed" (list . "peers") }}
{{- end }}
{{- end }}

{{/*
warmpath.yaml: the chart's listen, discovery and peers sections, the
policy, scoring, models and tenant values, then config merged over them.
Values that cannot work fail the render here.
*/}}
{{- define "warmpath.config" -}}
{{- $v := .Values }}
{{- $listen := dict "extproc" (printf ":%d" (int $v.ports.extproc)) "admin" (printf ":%d" (int $v.ports.admin)) }}
{{- if $v.tls.enabled }}
{{- $dir := trimSuffix "/" $v.tls.mountPath }}
{{- $_ := set $listen "tls" (dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "client_ca_file" (printf "%s/ca.crt" $dir)) }}
{{- else if $v.tls.allowPlaintext }}
{{- $_ := set $listen "allow_plaintext" true }}
{{- end }}
{{- $source := $v.tokenizers.source }}
{{- if not (has $source (list "none" "configMap" "pvc" "image")) }}
{{- fail (printf "tokenizers.source: %q is not one of none, configMap, pvc, image" $source) }}
{{- end }}
{{- if and (eq $source "pvc") (not $v.tokenizers.pvc.claimName) }}
{{- fail "tokenizers.source pvc needs tokenizers.pvc.claimName" }}
{{- end }}
{{- $dirs := list }}
{{- range $v.tokenizers.configMaps }}
{{- $dirs = append $dirs (trimSuffix "/" .dir) }}
{{- end }}
{{- $tokdir := trimSuffix "/" $v.tokenizers.path }}
{{- $models := list }}
{{- range $i, $m := $v.models }}
{{- $m = deepCopy $m }}
{{- with $m.tokenizer }}
{{- if eq $source "none" }}
{{- fail (printf "models[%d].tokenizer %q needs tokenizers.source (configMap, pvc or image)" $i .) }}
{{- end }}
{{- if and (eq $source "configMap") (not (has (trimSuffix "/" .) $dirs)) }}
{{- fail (printf "models[%d].tokenizer %q is not the dir of one of tokenizers.configMaps" $i .) }}
{{- end }}
{{- if not (isAbs .) }}
{{- $_ := set $m "tokenizer" (printf "%s/%s" $tokdir .) }}
{{- end }}
{{- end }}
{{- $models = append $models $m }}
{{- end }}
{{- $kube := dict "namespace" (include "warmpath.discoveryNamespace" .) }}
{{- with $v.discovery.labelSelector }}
{{- $_ := set $kube "label_selector" . }}
{{- end }}
{{- if eq $v.discovery.mode "inferencePool" }}
{{- if not $v.discovery.inferencePool }}
{{- fail "discovery.mode inferencePool needs discovery.inferencePool" }}
{{- end }}
{{- $_ := set $kube "inference_pool" $v.discovery.inferencePool }}
{{- else if ne $v.discovery.mode "pods" }}
{{- fail (printf "discovery.mode: %q is not one of pods, inferencePool" $v.discovery.mode) }}
{{- end }}
{{- with $v.discovery.defaults }}
{{- $_ := set $kube "defaults" (deepCopy .) }}
{{- end }}
{{- $cfg := dict "listen" $listen "policy" $v.policy "models" $models "discovery" (dict "kubernetes" $kube) }}
{{- with $v.scoring }}
{{- $_ := set $cfg "scoring" (deepCopy .) }}
{{- end }}
{{- with $v.tenant }}
{{- $_ := set $cfg "tenant" (deepCopy .) }}
{{- end }}
{{- if $v.otel.capturePrompts }}
{{- $_ := set $cfg "telemetry" (dict "capture_prompts" true) }}
{{- end }}
{{- if include "warmpath.peers" . }}
{{- $peers := deepCopy (default dict $v.peers.config) }}
{{- $_ := set $peers "token_file" (printf "%s/token" (trimSuffix "/" $v.peers.mountPath)) }}
{{- $_ := set $peers "dns" (printf "%s.%s.svc.%s:%d" (include "warmpath.peersService" .) .Release.Namespace $v.clusterDomain (int $v.ports.extproc)) }}
{{- $_ := set $cfg "peers" $peers }}
{{- end }}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy (default dict $v.config)) }}
{{- toYaml $cfg }}
{{- end }}
