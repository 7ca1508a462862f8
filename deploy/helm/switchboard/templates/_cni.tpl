{{/* The args of `switchboard cni install`: the node's CNI directories are mounted under
/host (volumes cni-bin and cni-conf of the agent DaemonSet), and the socket is the
agent's, at the same path on the host as in the agent container. */}}
{{- define "switchboard.cniInstallArgs" -}}
- cni
- install
- --bin-dir=/host/opt/cni/bin
- --conf-dir=/host/etc/cni/net.d
- --socket=/run/switchboard/cni.sock
- {{ printf "--on-agent-unreachable=%s" .Values.cni.onAgentUnreachable | quote }}
- {{ printf "--wait=%s" .Values.cni.wait | quote }}
- {{ printf "--log-format=%s" .Values.logFormat | quote }}
{{- end }}

{{/* The same install, kept: it stays running, installs again whenever the configuration
changes, and uninstalls when the pod stops. */}}
{{- define "switchboard.cniKeepArgs" -}}
{{ include "switchboard.cniInstallArgs" . }}
- --keep
{{- end }}

{{/* What the install containers share besides image and args. They write to root's
directories on the host, so they run as root, without any capability. */}}
{{- define "switchboard.cniInstallContainer" -}}
resources:
  requests:
    cpu: 10m
    memory: 32Mi
  limits:
    memory: 128Mi
{{ include "switchboard.rootContainerSecurityContext" . }}
volumeMounts:
  - name: cni-bin
    mountPath: /host/opt/cni/bin
  - name: cni-conf
    mountPath: /host/etc/cni/net.d
{{- end }}
