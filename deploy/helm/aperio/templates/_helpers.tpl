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
{{- if and (eq $v.workload "StatefulSet") (not (include "aperio.databaseKey" .)) -}}
{{- fail "aperio: workload StatefulSet runs servers that share PostgreSQL: set database.url (or database.existingSecretKey with secret.existingSecret), or use workload Deployment with one replica on SQLite" -}}
{{- end -}}
{{- if not (has $v.service.type (list "ClusterIP" "LoadBalancer")) -}}
{{- fail (printf "aperio: service.type %q: use ClusterIP (with an Ingress in front) or LoadBalancer" $v.service.type) -}}
{{- end -}}
{{- if and $v.metrics.enabled (eq (int $v.metrics.port) (int $v.service.port)) -}}
{{- fail "aperio: metrics.port must differ from service.port (the public port)" -}}
{{- end -}}
{{- range $k, $_ := $v.env -}}
{{- if has (lower $k) (list "server.token" "server_token" "database_url" "port" "host" "metrics_listen" "data_dir" "server_config") -}}
{{- fail (printf "aperio: env.%s is set by the chart: the token and the database URL come from the Secret (secret.*, database.*), the listeners from service.port and metrics.*, the data directory from persistence, the configuration file from config" $k) -}}
{{- end -}}
{{- if has (lower $k) (list "oidc.client_secret" "oidc_client_secret" "metrics_token") -}}
{{- fail (printf "aperio: env.%s is a secret and env is plain text in the pod spec: give it through extraEnv with valueFrom.secretKeyRef" $k) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z][a-z0-9_.]*$" $k) -}}
{{- fail (printf "aperio: env key %q is not a setting name (lower case, digits, _ and .)" $k) -}}
{{- end -}}
{{- end -}}
{{- range $k, $val := $v.config -}}
{{- if has (lower $k) (list "server" "token" "server_token" "database_url" "database" "port" "host" "metrics_listen" "data_dir") -}}
{{- fail (printf "aperio: config.%s is set by the chart: the token and the database URL come from the Secret (secret.*, database.*), the listeners from service.port and metrics.*, the data directory from persistence" $k) -}}
{{- end -}}
{{- if has (lower $k) (list "metrics_token" "oidc.client_secret") -}}
{{- fail (printf "aperio: config.%s is a secret and the configuration file is a ConfigMap: give it through extraEnv with valueFrom.secretKeyRef" $k) -}}
{{- end -}}
{{- if and (eq (lower $k) "oidc") (kindIs "map" $val) (hasKey $val "client_secret") -}}
{{- fail "aperio: config.oidc.client_secret is a secret and the configuration file is a ConfigMap: give it through extraEnv (APERIO_OIDC_CLIENT_SECRET with valueFrom.secretKeyRef)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The server's pod template, shared by the Deployment and the
StatefulSet. */}}
{{- define "aperio.podTemplate" -}}
{{- $dbKey := include "aperio.databaseKey" . -}}
metadata:
  labels:
    {{- include "aperio.selectorLabels" . | nindent 8 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 8 }}
    {{- end }}
  annotations:
    # A new token, URL or Secret in the values restarts the pods (a
    # generated token does not change on upgrade, so it is left out).
    checksum/secret: {{ printf "%s\n%s\n%s\n%s" .Values.secret.existingSecret .Values.secret.serverToken .Values.database.url $dbKey | sha256sum }}
    {{- if .Values.config }}
    # A changed configuration file rolls the pods, so that every setting
    # of it applies (some need a restart).
    checksum/config: {{ include "aperio.configFile" . | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 8 }}
    {{- end }}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 8 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 8 }}
  containers:
    - name: server
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      env:
        - name: APERIO_SERVER_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ include "aperio.secretName" . }}
              key: {{ .Values.secret.serverTokenKey }}
        {{- if $dbKey }}
        - name: APERIO_DATABASE_URL
          valueFrom:
            secretKeyRef:
              name: {{ include "aperio.secretName" . }}
              key: {{ $dbKey }}
        {{- end }}
        - name: APERIO_PORT
          value: {{ .Values.service.port | int | toString | quote }}
        {{- if .Values.metrics.enabled }}
        - name: APERIO_METRICS_LISTEN
          value: {{ printf "0.0.0.0:%d" (int .Values.metrics.port) | quote }}
        {{- end }}
        {{- if .Values.config }}
        - name: APERIO_SERVER_CONFIG
          value: /etc/aperio/aperio-server.yaml
        {{- end }}
        {{- range $k, $v := .Values.env }}
        - name: {{ printf "APERIO_%s" ($k | upper | replace "." "_") }}
          value: {{ if kindIs "slice" $v }}{{ join "," $v | quote }}{{ else }}{{ toString $v | quote }}{{ end }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 12 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ int .Values.service.port }}
        {{- if .Values.metrics.enabled }}
        - name: metrics
          containerPort: {{ int .Values.metrics.port }}
        {{- end }}
      # 503 once SIGTERM began: the Service stops sending visitors
      # while the server drains.
      readinessProbe:
        httpGet:
          path: /aperio/readyz
          port: http
        periodSeconds: {{ int .Values.readinessProbe.periodSeconds }}
        failureThreshold: {{ int .Values.readinessProbe.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /aperio/healthz
          port: http
        periodSeconds: {{ int .Values.livenessProbe.periodSeconds }}
        failureThreshold: {{ int .Values.livenessProbe.failureThreshold }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 12 }}
      resources:
        {{- toYaml .Values.resources | nindent 12 }}
      volumeMounts:
        - name: data
          mountPath: /data
        {{- if .Values.config }}
        - name: config
          mountPath: /etc/aperio
          readOnly: true
        {{- end }}
        - name: tmp
          mountPath: /tmp
  volumes:
    - name: tmp
      emptyDir: {}
    {{- if .Values.config }}
    - name: config
      configMap:
        name: {{ include "aperio.fullname" . }}-config
    {{- end }}
    - name: data
      {{- if and (not $dbKey) .Values.persistence.enabled }}
      persistentVolumeClaim:
        claimName: {{ .Values.persistence.existingClaim | default (printf "%s-data" (include "aperio.fullname" .)) }}
      {{- else }}
      # PostgreSQL holds the state (or persistence is off): /data is
      # scratch space.
      emptyDir: {}
      {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 8 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 8 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 8 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 8 }}
  {{- end }}
{{- end -}}

{{/* The server's configuration file, from values.config. */}}
{{- define "aperio.configFile" -}}
{{ toYaml .Values.config }}
{{- end -}}
