-- Argo CD action "retry" for an InferenceRollout: start the rolled-back release again
-- from step 1.
-- It sets status.requests.retry = true, as `kubectl inference-rollout retry` does; the operator
-- acts on it and clears it in its next status write. Argo CD sees that only status changed and
-- sends the patch to the status subresource, so the spec (and git) never drift.
if obj.status == nil then
  obj.status = {}
end
if obj.status.requests == nil then
  obj.status.requests = {}
end
obj.status.requests.retry = true
return obj
