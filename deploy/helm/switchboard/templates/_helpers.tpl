{{/* Selector labels of one component. Call with (dict "root" $ "component" "name"). */}}
{{- define "switchboard.selector" -}}
app.kubernetes.io/name: switchboard
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* All labels of one component: the selector plus the chart's. */}}
{{- define "switchboard.labels" -}}
{{ include "switchboard.selector" . }}
app.kubernetes.io/version: {{ .root.Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{- define "switchboard.image" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/* Every pod runs as the distroless nonroot user. */}}
{{- define "switchboard.podSecurityContext" -}}
automountServiceAccountToken: false
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{- define "switchboard.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* For containers that write to host directories, which the node creates owned by
root (hostPath DirectoryOrCreate): uid 0, but without any capability, so no more than
the owner of those directories may do. */}}
{{- define "switchboard.rootContainerSecurityContext" -}}
securityContext:
  runAsNonRoot: false
  runAsUser: 0
  runAsGroup: 0
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* --registry-backend and the chosen backend's flags, as container args. Helm reads
every number in the values as a float, which prints as 1e+06 from 1000000; the schema
allows only integers there, so they print as integers. */}}
{{- define "switchboard.backendArgs" -}}
- {{ printf "--registry-backend=%s" .Values.backend.name | quote }}
{{- range $flag, $value := index .Values.backend.flags .Values.backend.name }}
{{- if kindIs "float64" $value }}{{ $value = int64 $value }}{{ end }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- end }}

{{/* The control plane config's database section, from controlplane.database. */}}
{{- define "switchboard.controlplaneDatabase" -}}
{{- $db := .Values.controlplane.database -}}
database:
{{- if eq $db.type "etcd" }}
  type: etcd
  etcd:
    {{- if not $db.etcd.endpoints }}
    {{- fail "controlplane.database.etcd.endpoints is required when controlplane.database.type is etcd" }}
    {{- end }}
    endpoints:
      {{- toYaml $db.etcd.endpoints | nindent 6 }}
    prefix: {{ $db.etcd.prefix | quote }}
    lease_ttl: {{ $db.etcd.leaseTTL | quote }}
    {{- if $db.etcd.tlsSecret }}
    ca_file: /etc/switchboard-etcd/tls/ca.crt
    cert_file: /etc/switchboard-etcd/tls/tls.crt
    key_file: /etc/switchboard-etcd/tls/tls.key
    {{- end }}
    {{- if and $db.etcd.username (not $db.etcd.passwordSecret) }}
    {{- fail "controlplane.database.etcd.username needs controlplane.database.etcd.passwordSecret" }}
    {{- end }}
    {{- if $db.etcd.username }}
    username: {{ $db.etcd.username | quote }}
    password_file: /etc/switchboard-etcd/password/password
    {{- end }}
{{- else }}
  type: sqlite
  path: /var/lib/switchboard/controlplane.db
{{- end }}
{{- end }}
