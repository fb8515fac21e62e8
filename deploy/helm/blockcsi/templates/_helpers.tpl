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
{{- end }}
