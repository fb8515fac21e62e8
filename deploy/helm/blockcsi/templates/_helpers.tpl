{{/*
Shared snippets. The driver name is not a value: kubelet's plugin directory,
the CSIDriver object and every PV carry it, so changing it is a new driver.
*/}}
{{- define "blockcsi.driverName" -}}
blockcsi.io
{{- end }}

{{- define "blockcsi.labels" -}}
app.kubernetes.io/name: blockcsi
app.kubernetes.io/part-of: blockcsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "blockcsi.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "blockcsi.socketDir" -}}
{{ printf "%s/plugins/%s" .Values.kubeletDir (include "blockcsi.driverName" .) }}
{{- end }}

{{- /* The namespace of the fences' Leases: the controller's and the nodes' must agree. */ -}}
{{- define "blockcsi.fenceNamespace" -}}
{{ default .Release.Namespace .Values.fencing.namespace }}
{{- end }}

{{- define "blockcsi.validate" -}}
{{- if not (or (eq .Values.backend.type "remote") (eq .Values.backend.type "local")) }}
{{- fail "backend.type must be remote or local" }}
{{- end }}
{{- if not (or (eq .Values.node.connector "iscsi") (eq .Values.node.connector "userspace")) }}
{{- fail "node.connector must be iscsi or userspace" }}
{{- end }}
{{- if and .Values.volumeSnapshotClass.create (not .Values.sidecars.snapshotter.enabled) }}
{{- fail "volumeSnapshotClass.create needs sidecars.snapshotter.enabled" }}
{{- end }}
{{- if and (eq .Values.backend.type "remote") (not .Values.backend.remote.tlsSecretName) }}
{{- fail "backend.remote.tlsSecretName is required: the agent is reached over mutual TLS only" }}
{{- end }}
{{- if .Values.fencing.enabled }}
{{- /* Durations as blockcsi reads them: a number and one unit; 0 would turn the check off. */}}
{{- $positive := "^[1-9][0-9]*(ms|s|m|h)$" }}
{{- $after := toString (default "" .Values.fencing.deadNodesAfter) }}
{{- if not (regexMatch $positive $after) }}
{{- if and .Values.fencing.taintFencedNodes (regexMatch "^0*(ms|s|m|h)?$" $after) }}
{{- fail "fencing.taintFencedNodes needs fencing.deadNodesAfter (the watcher that fences; blockcsi refuses --taint-fenced-nodes without --fence-dead-nodes-after): a duration above zero with one unit, e.g. 5m" }}
{{- end }}
{{- fail "fencing.deadNodesAfter must be a duration above zero with one unit (ms, s, m or h), e.g. 5m" }}
{{- end }}
{{- with .Values.fencing.checkInterval }}
{{- if not (regexMatch $positive (toString .)) }}
{{- fail "fencing.checkInterval must be a duration above zero with one unit (ms, s, m or h), e.g. 30s, or empty: a node that never checks never lets go of a fenced volume, and is never unfenced" }}
{{- end }}
{{- end }}
{{- if and .Values.controller.replicas (gt (int .Values.controller.replicas) 1) }}
{{- fail "controller.replicas must be 1 or empty with fencing.enabled: the fence watcher elects no leader, and two would fence, taint and record every event twice" }}
{{- end }}
{{- end }}
{{- end }}
