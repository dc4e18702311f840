{{/* Names and labels shared by every template. */}}

{{- define "grpo-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "grpo-operator.fullname" -}}
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

{{- define "grpo-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "grpo-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "grpo-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "grpo-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "grpo-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "grpo-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "grpo-operator.peeringName" -}}
{{- default (include "grpo-operator.fullname" .) .Values.operator.peering.name }}
{{- end }}

{{/* kopf peering, only where no leader election decides who reconciles. */}}
{{- define "grpo-operator.peering" -}}
{{- if and .Values.operator.peering.enabled (not .Values.operator.leaderElection.enabled) }}true{{- end }}
{{- end }}

{{- define "grpo-operator.leaseName" -}}
{{- default (include "grpo-operator.fullname" .) .Values.operator.leaderElection.leaseName }}
{{- end }}

{{- define "grpo-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Fail early, with the reason, where the operator could not work. Only against a live cluster:
`lookup` returns nothing offline (helm template, helm lint), where the APIs a cluster serves are unknown. */}}
{{- define "grpo-operator.checks" -}}
{{- with .Values.operator.leaderElection }}
{{- if and .enabled (not (and (lt (int .retryPeriodSeconds) (int .renewDeadlineSeconds)) (lt (int .renewDeadlineSeconds) (int .leaseDurationSeconds)))) }}
{{- fail "operator.leaderElection: needs retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds (a leader must know it lost the lease before another may take it)" }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.operator.leaderElection.enabled) }}
{{- fail "replicaCount: more than one replica needs operator.leaderElection.enabled=true (two operators without a leader would both reconcile every GRPOJob); with leader election off set replicaCount=1" }}
{{- end }}
{{- $live := lookup "v1" "Namespace" "" "kube-system" }}
{{- if and $live .Values.kuberay.requireCRD (not (.Capabilities.APIVersions.Has "ray.io/v1/RayJob")) }}
{{- fail "kuberay.requireCRD: the cluster serves no ray.io/v1 RayJob; install the KubeRay operator first (or set kuberay.requireCRD=false)" }}
{{- end }}
{{- if and $live .Values.kuberay.requireCRD }}
{{- include "grpo-operator.kuberayFields" . }}
{{- end }}
{{- if and $live .Values.kueue.requireCRD (not (.Capabilities.APIVersions.Has "kueue.x-k8s.io/v1beta1")) }}
{{- fail "kueue.requireCRD: the cluster serves no kueue.x-k8s.io/v1beta1 API; install Kueue first (or set kueue.requireCRD=false)" }}
{{- end }}
{{- end }}

{{/* The installed RayJob CRD has every field the operator renders (files/kuberay-required-fields.yaml,
generated from grpo_operator/kuberay.py): an older CRD prunes a field silently and the job hangs. */}}
{{- define "grpo-operator.kuberayFields" -}}
{{- $required := .Files.Get "files/kuberay-required-fields.yaml" | fromYaml }}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $required.crd }}
{{- range $served := (($crd | default dict).spec | default dict).versions | default list }}
{{- if eq $served.name $required.version }}
{{- range $field := $required.fields }}
{{- $node := $served.schema.openAPIV3Schema }}
{{- range $step := $field.path }}
{{- if eq $step "[]" }}
{{- $node = (get $node "items") | default dict }}
{{- else }}
{{- $node = (get ((get $node "properties") | default dict) $step) | default dict }}
{{- end }}
{{- end }}
{{- if not $node }}
{{- fail (printf "kuberay.requireCRD: the installed KubeRay's RayJob CRD (%s) lacks %s (KubeRay >= %s: %s); install KubeRay v%s or later, CRDs included (Helm does not upgrade CRDs: kubectl apply --server-side -k 'github.com/ray-project/kuberay/ray-operator/config/crd?ref=v%s'), or set kuberay.requireCRD=false" $required.crd (join "." $field.path | replace ".[]" "[]") $field.since $field.why $required.floor $required.floor) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
