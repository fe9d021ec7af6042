{{/* The chart's name, at most 63 characters (a label value's limit). */}}
{{- define "aperio.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release name, prefixed with the chart's
unless it already contains it. */}}
{{- define "aperio.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "aperio.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aperio.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "aperio.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "aperio.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The Secret holding the master token (and the database URL). */}}
{{- define "aperio.secretName" -}}
{{- default (include "aperio.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{/* The key of the database URL in that Secret; empty without one. */}}
{{- define "aperio.databaseKey" -}}
{{- if .Values.secret.existingSecret -}}
{{- .Values.database.existingSecretKey -}}
{{- else if .Values.database.url -}}
database-url
{{- end -}}
{{- end -}}

{{/* Every combination of values the server cannot run with stops the
render here, with what to change. */}}
{{- define "aperio.validate" -}}
{{- $v := .Values -}}
{{- if and $v.database.url $v.secret.existingSecret -}}
{{- fail "aperio: database.url goes into the chart's own Secret, but secret.existingSecret is set: put the URL in that Secret and name its key in database.existingSecretKey" -}}
{{- end -}}
{{- if and $v.database.existingSecretKey (not $v.secret.existingSecret) -}}
{{- fail "aperio: database.existingSecretKey names a key of secret.existingSecret, which is not set: set secret.existingSecret, or give the URL in database.url" -}}
{{- end -}}
{{- if and $v.database.url (not (regexMatch "^postgres(ql)?://" $v.database.url)) -}}
{{- fail "aperio: database.url must be a postgres:// or postgresql:// URL" -}}
{{- end -}}
{{- if and (gt (int $v.replicaCount) 1) (not (include "aperio.databaseKey" .)) -}}
{{- fail (printf "aperio: replicaCount is %d, but several servers need PostgreSQL: set database.url (or database.existingSecretKey with secret.existingSecret). Without a database each server keeps its own SQLite file, so run one replica" (int $v.replicaCount)) -}}
{{- end -}}
{{- if not (has $v.service.type (list "ClusterIP" "LoadBalancer")) -}}
{{- fail (printf "aperio: service.type %q: use ClusterIP (with an Ingress in front) or LoadBalancer" $v.service.type) -}}
{{- end -}}
{{- if and $v.metrics.enabled (eq (int $v.metrics.port) (int $v.service.port)) -}}
{{- fail "aperio: metrics.port must differ from service.port (the public port)" -}}
{{- end -}}
{{- range $k, $_ := $v.config -}}
{{- if has (lower $k) (list "server.token" "server_token" "database_url" "port" "host" "metrics_listen" "data_dir") -}}
{{- fail (printf "aperio: config.%s is set by the chart: the token and the database URL come from the Secret (secret.*, database.*), the listeners from service.port and metrics.*, the data directory from persistence" $k) -}}
{{- end -}}
{{- if has (lower $k) (list "oidc.client_secret" "oidc_client_secret" "metrics_token") -}}
{{- fail (printf "aperio: config.%s is a secret and config is plain text in the pod spec: give it through extraEnv with valueFrom.secretKeyRef" $k) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z][a-z0-9_.]*$" $k) -}}
{{- fail (printf "aperio: config key %q is not a setting name (lower case, digits, _ and .)" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
