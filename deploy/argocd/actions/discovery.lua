-- Argo CD resource actions for rollouts.inference.dev/InferenceRollout: which of promote, abort
-- and retry apply to the live object. Registered under
-- resource.customizations.actions.rollouts.inference.dev_InferenceRollout (docs/gitops.md).
--
-- Each action only sets a one-shot request in status.requests, exactly what
-- `kubectl inference-rollout promote|abort|retry` writes: the spec (and so git) never changes.
local actions = {}
actions["promote"] = {["disabled"] = true, ["iconClass"] = "fa fa-fw fa-forward",
                      ["displayName"] = "Promote: finish the current step"}
actions["abort"] = {["disabled"] = true, ["iconClass"] = "fa fa-fw fa-undo",
                    ["displayName"] = "Abort: all traffic back to stable"}
actions["retry"] = {["disabled"] = true, ["iconClass"] = "fa fa-fw fa-redo",
                    ["displayName"] = "Retry the rolled-back release"}

local status = obj.status
if status == nil then
  return actions
end
local releasing = status.canaryRevision ~= nil and status.canaryRevision ~= ""
local aborted = status.aborted == true
if releasing and not aborted then
  actions["promote"]["disabled"] = false
  actions["abort"]["disabled"] = false
end
if aborted then
  actions["retry"]["disabled"] = false
end
return actions
