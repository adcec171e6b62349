{{/* The release's objects are named after it: mirror-v3, or <release>-mirror-v3. */}}
{{- define "mirror-v3.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mirror-v3.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mirror-v3.labels" -}}
{{ include "mirror-v3.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mirror-v3
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mirror-v3.serviceAccountName" -}}
{{- default (include "mirror-v3.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The pod: the same for the Deployment (shards: 1) and the StatefulSet (shards > 1). */}}
{{- define "mirror-v3.podTemplate" -}}
metadata:
  labels:
    {{- include "mirror-v3.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A config change rolls the pods.
    checksum/config: {{ .Values.config | toYaml | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "mirror-v3.serviceAccountName" . }}
  automountServiceAccountToken: false  # mirror-v3 never calls the Kubernetes API
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    fsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: mirror
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["run", "--config", "/etc/mirror-v3/config.yaml"]
      env:
        {{- if gt (int .Values.shards) 1 }}
        - name: POD_INDEX
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
        - name: MIRROR_V3_SHARD
          value: "$(POD_INDEX)/{{ .Values.shards }}"
        {{- end }}
        - name: LOG_FORMAT
          value: {{ .Values.logFormat | quote }}
        - name: LOG_LEVEL
          value: {{ .Values.logLevel | quote }}
        - name: MIRROR_V3_METRICS_PORT
          value: {{ .Values.metricsPort | quote }}
        {{- if not (kindIs "invalid" .Values.readinessLag) }}
        - name: MIRROR_V3_READINESS_LAG
          value: {{ .Values.readinessLag | int64 | quote }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if .Values.secretName }}
      envFrom:
        - secretRef:
            name: {{ .Values.secretName }}
      {{- end }}
      ports:
        - name: metrics
          containerPort: {{ .Values.metricsPort }}
      # Spark's JVM takes 5-15 s to start; the process answers /healthz from its first second.
      startupProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: 5
        failureThreshold: 24
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: 10
        timeoutSeconds: 5
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      volumeMounts:
        - name: config
          mountPath: /etc/mirror-v3
          readOnly: true
        - name: scratch
          mountPath: /tmp
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "mirror-v3.fullname" . }}-config
    - name: scratch
      emptyDir:
        sizeLimit: {{ .Values.scratchSizeLimit }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
