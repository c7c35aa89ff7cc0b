{{/*
The operator's permissions, derived from its code (operator/inference_rollout): every API call it
or kopf makes, and nothing else. No wildcards. tests/sandbox/test_delivery_rbac.py runs the
operator under exactly these rules through whole releases and fails on any 403; a rule the code
no longer needs should be removed here, and a new API call in the code needs its rule here.

The comments below are rendered into the manifests on purpose: `helm template` shows each rule
with its reason.
*/}}

{{/* Rules on objects in the watched namespaces (a ClusterRole in cluster mode, a Role per
namespace in namespaces mode). */}}
{{- define "inference-rollout.rules" -}}
# InferenceRollouts.
#   get    - every reconcile starts from a fresh read of the object (reconciler, handlers).
#   list, watch - kopf's watch stream, which wakes each rollout's daemon and the delete handler.
#   patch  - kopf's own bookkeeping: the finalizer rollouts.inference.dev/finalizer and its
#            progress/last-handled-configuration annotations (merge and JSON patches).
#   Never create, update or delete: rollouts belong to the user (or git); steering goes through
#   the status subresource.
- apiGroups: ["rollouts.inference.dev"]
  resources: ["inferencerollouts"]
  verbs: ["get", "list", "watch", "patch"]
# The status subresource.
#   patch  - the whole status (phase, step, weight, analysis, conditions) is one merge patch,
#            guarded by resourceVersion; it is read back through the main resource (get above).
- apiGroups: ["rollouts.inference.dev"]
  resources: ["inferencerollouts/status"]
  verbs: ["patch"]
# The finalizers subresource.
#   update - the revisions' Deployments/Services and an owned HTTPRoute carry an ownerReference
#            with blockOwnerDeletion: true; where the OwnerReferencesPermissionEnforcement
#            admission plugin is enabled (e.g. OpenShift) setting it requires this. It allows
#            nothing else (no spec, no status).
- apiGroups: ["rollouts.inference.dev"]
  resources: ["inferencerollouts/finalizers"]
  verbs: ["update"]
# Each revision's Deployment (<rollout>-<revision>).
#   list   - observe the rollout's revisions by label (desired/ready/available pods).
#   watch  - kopf's watch stream: a revision's pods Ready (or lost) wake its rollout at once
#            instead of at the next 2 s poll (core/wakeups.py).
#   create - a new revision's Deployment, once; its pod template never changes afterwards.
#   patch  - scale it (spec.replicas only); on deletion with a user-owned route, drop the
#            stable revision's ownerReferences so garbage collection keeps the route's backend.
#   delete - an old or rolled-back revision, once no traffic points at it.
#   No get (never read by name), no update.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Each revision's Service (the route's backend).
#   get    - does it exist yet; create - once per revision; patch - the orphaning above;
#   delete - with its revision.
{{- if .Values.adapterReleases.enabled }}
#   list   - adapter releases (adapterReleases.enabled): each serving version's Service, read
#            back by the rollout's label; patch also records the pods asked of it.
{{- end }}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "create", "patch", "delete"{{ if .Values.adapterReleases.enabled }}, "list"{{ end }}]
# Pods.
#   list   - the rollout's Pending pods, to report canary pods that no node can take (no GPU).
{{- if .Values.adapterReleases.enabled }}
#            With adapter releases also its pods and their adapter-set labels.
#   patch  - adapter releases (adapterReleases.enabled): a pod's adapter-set label and its two
#            annotations (moved-at, verified start); the label takes it out of, or puts it into,
#            a serving version's Service. Adapters are loaded through the pod's own vLLM API.
{{- end }}
#   Nothing else: no get, exec, logs or eviction.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"{{ if .Values.adapterReleases.enabled }}, "patch"{{ end }}]
# HTTPRoutes.
#   get    - read the weights, and verify after every write that the API server holds them.
#   list, watch - kopf's watch stream: the gateway's answer for the route's new generation
#            wakes the rollout at once instead of at the next 2 s poll (core/wakeups.py).
#   patch  - existing-route mode: a merge patch of the rules' backendRefs, guarded by
#            resourceVersion; owned-route mode: server-side apply of the whole route.
#   create - server-side apply that creates the owned route is authorized as create as well.
#   No delete: an owned route goes with its rollout by garbage collection (ownerReference).
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Events (core v1).
#   create - one Event per step, promotion, rollback (StepWeightSet, Promoted, AnalysisFailed,
#            ...), named after what it says (operator/inference_rollout/events.py); kopf's own
#            Events about failed handlers.
#   get, patch - the same Event again is counted on the existing one (count, lastTimestamp), as
#            client-go's recorder aggregates, instead of a second object. No list, watch, delete.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "get", "patch"]
# ConfigMaps.
#   get    - the business evaluation set named by spec.evaluation.configMapRef, read before each
#            run (once per canary revision, plus retries after an error). No list or watch, no
#            write. Names are per rollout, so resourceNames cannot narrow it.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
{{- if .Values.rbac.inferencePools }}
# Each revision's InferencePool (rbac.inferencePools; rollouts with backendKind InferencePool).
#   get    - does it exist yet; create - once per revision, beside its Service;
#   delete - with its revision. No list, watch, patch or update.
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "create", "delete"]
{{- end }}
{{- if .Values.prometheus.bearerTokenSecret }}
# One Secret, by name (values: prometheus.bearerTokenSecret).
#   get    - the bearer token of spec.analysis.prometheus.bearerTokenSecretRef, read before each
#            analysis. resourceNames cannot narrow list or watch, and none is needed.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ .Values.prometheus.bearerTokenSecret | quote }}]
  verbs: ["get"]
{{- end }}
{{- $notify := compact (concat (list .Values.notifications.namespaceSecret) .Values.notifications.secretNames) }}
{{- if $notify }}
# The notification Secrets, by name (values: notifications.namespaceSecret, .secretNames).
#   get    - the webhook URLs (keys webhookURL, slackURL), read when a notice is sent (a
#            rollback, promotion, pause, limit); never listed or watched.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ range $i, $n := $notify }}{{ if $i }}, {{ end }}{{ $n | quote }}{{ end }}]
  verbs: ["get"]
{{- end }}
{{- end -}}

{{/* kopf's cluster-scoped scanning (rbac.kopfScanning). */}}
{{- define "inference-rollout.scanningRules" -}}
# CustomResourceDefinitions (cluster-scoped).
#   list, watch - kopf's resource observer: it re-scans the API when a CRD changes, so an
#            upgraded InferenceRollout CRD is served without restarting the operator. Reading
#            the API's discovery endpoints needs no rule (system:discovery).
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- if eq .Values.watch.mode "namespaces" }}
# Namespaces (cluster-scoped), namespaces mode only.
#   list, watch - kopf's namespace observer: it serves a listed namespace once it exists and
#            stops when it is deleted. In cluster mode kopf watches everything and skips this.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end -}}
