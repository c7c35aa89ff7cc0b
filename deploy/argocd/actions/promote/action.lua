-- Argo CD action "promote" for an InferenceRollout: finish the current step now; the canary's
-- weight moves on to the next step (after the last step, the canary becomes stable).
-- It sets status.requests.promote = true, as `kubectl inference-rollout promote` does; the operator
-- acts on it and clears it in its next status write. Argo CD sees that only status changed and
-- sends the patch to the status subresource, so the spec (and git) never drift.
if obj.status == nil then
  obj.status = {}
end
if obj.status.requests == nil then
  obj.status.requests = {}
end
obj.status.requests.promote = true
return obj
