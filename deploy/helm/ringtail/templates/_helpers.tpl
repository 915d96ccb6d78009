{{/* The release's name, cut to what a label value and a DNS name allow. */}}
{{- define "ringtail.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ringtail.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ringtail.labels" -}}
{{ include "ringtail.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "ringtail.serviceAccountName" -}}
{{- default (include "ringtail.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Whether the Kubernetes metadata actor may run: RBAC and the token. */}}
{{- define "ringtail.kubernetes" -}}
{{- $e := toString .Values.kubernetes.enabled -}}
{{- if not (has $e (list "auto" "true" "false")) -}}
{{- fail (printf "kubernetes.enabled: auto, true or false (got %s)" $e) -}}
{{- end -}}
{{- if ne $e "false" -}}true{{- end -}}
{{- end -}}

{{/*
The pod's capabilities, each for a reason (docs/kubernetes.md, "Privileges").
The supervisor (`ringtail run`, root) starts the loader with them; the
loader drops all of them before it reads a single event (its TLS attacher
keeps BPF, PERFMON, SYS_PTRACE, DAC_READ_SEARCH and, on Linux 6.6+,
CHECKPOINT_RESTORE, before it SYS_ADMIN: HTTPS of the pods that start
later), the actors are exec'd with CAP_SETUID,
CAP_SETGID and CAP_SETPCAP only and become the actors' user with none.
*/}}
{{- define "ringtail.capabilities" -}}
# the loader: create maps, load programs (bpf(2))
- BPF
# the loader: tracing programs and the kernel memory they read
- PERFMON
# the loader at start: /proc/PID/{exe,environ,fd,maps,root} of the
# node's other processes (discovery, names); the TLS attacher: the OpenSSL
# files and Go executables they run and map
- SYS_PTRACE
# the same files' modes (0400/0500, other owners)
- DAC_READ_SEARCH
# the supervisor: the actors become the image's users ringtail and
# ringtail-k8s
- SETUID
# the actors' groups; the loader joins the actors' group
- SETGID
# dropping bounding sets (the loader's, the actors')
- SETPCAP
# the supervisor gives /run/ringtail/actors to the actors' user (and
# /run/ringtail/k8s to the k8s-actor's)
- CHOWN
# the supervisor stops the actors (SIGTERM, SIGKILL after 5 s): another
# uid; their parent-death signal is checked against its credentials too
- KILL
{{- if .Values.tls.enabled }}
# the TLS uprobes (HTTPS, tls.enabled): Linux 6.x refuses their
# perf_event_open(2) to BPF + PERFMON alone; the loader drops it after
# start, its TLS attacher keeps it. tls.enabled=false removes it (and
# HTTPS capture).
- SYS_ADMIN
# the TLS attacher on Linux 6.6+ (which keeps no SYS_ADMIN there):
# /proc/PID/map_files, the exact file a process maps
- CHECKPOINT_RESTORE
{{- end -}}
{{- end -}}

{{/* A TOML value: a string, number, boolean or a list of those. */}}
{{- define "ringtail.tomlValue" -}}
{{- if kindIs "map" .value -}}
{{- fail (printf "%s: a table is not a value here; give it a section of its own in config (\"%s\": {...})" .key .key) -}}
{{- end -}}
{{- toJson .value -}}
{{- end -}}

{{/* ringtail.toml: the chart's sections, then .Values.config over them. */}}
{{- define "ringtail.toml" -}}
{{- $stdout := .Values.stdout -}}
{{- if kindIs "invalid" $stdout -}}{{- $stdout = not .Values.otlp.endpoint -}}{{- end -}}
{{- $s := dict
  "actors" (dict "user" "ringtail" "group" "ringtail" "k8s_user" "ringtail-k8s")
  "pipeline" (dict "runtime_dir" "/run/ringtail")
  "probe" (dict "backend" .Values.probe.backend)
  "tls" (dict "enabled" .Values.tls.enabled)
  "export" (dict "stdout" $stdout)
-}}
{{- if .Values.discovery -}}{{- $_ := set $s "discovery" (deepCopy .Values.discovery) -}}{{- end -}}
{{- if .Values.prometheus.enabled -}}
{{- $_ := set $s "export.prometheus" (dict "listen" (printf "0.0.0.0:%d" (int .Values.prometheus.port)) "allow_remote" true) -}}
{{- end -}}
{{- $k := dict -}}
{{- $e := toString .Values.kubernetes.enabled -}}
{{- if ne $e "auto" -}}{{- $_ := set $k "enabled" $e -}}{{- end -}}
{{- if not (kindIs "invalid" .Values.kubernetes.maxPods) -}}{{- $_ := set $k "max_pods" .Values.kubernetes.maxPods -}}{{- end -}}
{{- if $k -}}{{- $_ := set $s "kubernetes" $k -}}{{- end -}}
{{- $s = mergeOverwrite $s (deepCopy .Values.config) -}}
# Rendered by the ringtail Helm chart; README "Configuration" has every key.
{{- range $section, $values := $s }}

[{{ $section }}]
{{- range $key, $value := $values }}
{{- if not (kindIs "invalid" $value) }}
{{ $key }} = {{ include "ringtail.tomlValue" (dict "key" (printf "%s.%s" $section $key) "value" $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The monitors scrape the port the pods serve /metrics on. */}}
{{- define "ringtail.needsMetrics" -}}
{{- if and (or .Values.prometheus.podMonitor.enabled .Values.prometheus.serviceMonitor.enabled) (not .Values.prometheus.enabled) -}}
{{- fail "prometheus.podMonitor and prometheus.serviceMonitor need prometheus.enabled (the pods' /metrics)" -}}
{{- end -}}
{{- end -}}
