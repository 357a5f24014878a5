{{/* Names and labels shared by every object of the chart. */}}
{{- define "c4.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "c4.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "c4.operator.name" -}}{{ include "c4.fullname" . }}-operator{{- end -}}
{{- define "c4.nodePlugin.name" -}}{{ include "c4.fullname" . }}-node-plugin{{- end -}}
{{- define "c4.reports.name" -}}{{ include "c4.fullname" . }}-reports{{- end -}}
{{- define "c4.tls.secretName" -}}
{{- if and (eq .Values.reports.tls.mode "secret") .Values.reports.tls.secretName -}}
{{ .Values.reports.tls.secretName }}
{{- else -}}
{{ include "c4.fullname" . }}-reports-tls
{{- end -}}
{{- end -}}

{{- define "c4.operator.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}
{{- define "c4.nodePlugin.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-plugin
{{- end -}}

{{/* image "<repository>" -> <registry>/<repository>:<tag or appVersion> */}}
{{- define "c4.image" -}}
{{- $root := index . 0 -}}
{{- $repo := index . 1 -}}
{{- $tag := default $root.Chart.AppVersion $root.Values.image.tag -}}
{{- if $root.Values.image.registry -}}
{{ printf "%s/%s:%s" $root.Values.image.registry $repo $tag }}
{{- else -}}
{{ printf "%s:%s" $repo $tag }}
{{- end -}}
{{- end -}}

{{/* The report endpoint's DNS names (the serving certificate's SANs). */}}
{{- define "c4.reports.dnsNames" -}}
- {{ include "c4.reports.name" . }}
- {{ include "c4.reports.name" . }}.{{ .Release.Namespace }}
- {{ include "c4.reports.name" . }}.{{ .Release.Namespace }}.svc
- {{ include "c4.reports.name" . }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}

{{/* The chart's own PriorityClass: created (priorityClass.create) outside kube-system only. */}}
{{- define "c4.priorityClass.create" -}}
{{- if and .Values.priorityClass.create (ne .Release.Namespace "kube-system") -}}true{{- end -}}
{{- end -}}
{{- define "c4.priorityClass.name" -}}
{{- default (printf "%s-node-critical" (include "c4.fullname" .)) .Values.priorityClass.name -}}
{{- end -}}
{{/* priorityClassName (list . <explicit name> <system class for kube-system>): the explicit name;
else the system class in kube-system; else the chart's class when it creates one; else "". */}}
{{- define "c4.priorityClassName" -}}
{{- $root := index . 0 -}}
{{- $explicit := index . 1 -}}
{{- if $explicit -}}
{{ $explicit }}
{{- else if eq $root.Release.Namespace "kube-system" -}}
{{ index . 2 }}
{{- else if include "c4.priorityClass.create" $root -}}
{{ include "c4.priorityClass.name" $root }}
{{- end -}}
{{- end -}}
