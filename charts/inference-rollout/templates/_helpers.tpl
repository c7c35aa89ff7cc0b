{{/* Names and labels shared by every template. */}}

{{- define "inference-rollout.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: "<release>-inference-rollout", or just the release name when it
already contains the chart name (helm install inference-rollout ...). */}}
{{- define "inference-rollout.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "inference-rollout.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "inference-rollout.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "inference-rollout.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inference-rollout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "inference-rollout.labels" -}}
{{ include "inference-rollout.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The namespaces of namespaces mode, checked: a namespaced operator with nothing to watch is a
mistake, and kopf would refuse to start without a scope. */}}
{{- define "inference-rollout.watchedNamespaces" -}}
{{- if eq .Values.watch.mode "namespaces" -}}
{{- if not .Values.watch.namespaces -}}
{{- fail "watch.mode=namespaces needs watch.namespaces: [a, b, ...]" -}}
{{- end -}}
{{- toJson (uniq .Values.watch.namespaces) -}}
{{- else if eq .Values.watch.mode "cluster" -}}
{{- if .Values.watch.namespaces -}}
{{- fail "watch.namespaces is only used with watch.mode=namespaces (cluster mode watches every namespace)" -}}
{{- end -}}
[]
{{- else -}}
{{- fail (printf "watch.mode must be cluster or namespaces, not %q" .Values.watch.mode) -}}
{{- end -}}
{{- end -}}
