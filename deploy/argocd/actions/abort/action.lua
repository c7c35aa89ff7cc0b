-- Argo CD action "abort" for an InferenceRollout: roll back: all traffic to the stable
-- revision in one write; the canary scales down after abortScaleDownDelay.
-- It sets status.requests.abort = true, as `kubectl inference-rollout abort` does; the operator
-- acts on it and clears it in its next status write. Argo CD sees that only status changed and
-- sends the patch to the status subresource, so the spec (and git) never drift.
if obj.status == nil then
  obj.status = {}
end
if obj.status.requests == nil then
  obj.status.requests = {}
end
obj.status.requests.abort = true
return obj
