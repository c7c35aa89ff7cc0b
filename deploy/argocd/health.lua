-- Argo CD health check for rollouts.inference.dev/InferenceRollout.
-- Register it in argocd-cm under the key
--   resource.customizations.health.rollouts.inference.dev_InferenceRollout
-- (docs/gitops.md). Argo CD runs it with the live object in the global `obj`.
--
-- The operator derives status.phase from the release's state (core/conditions.py):
--   Healthy     the stable revision serves all traffic with every replica Ready
--   Progressing a release is under way (or the stable revision is not yet fully Ready)
--   Paused      a pause was requested, or analysis errors hit their limit with onErrorLimit: Pause
--   Degraded    rolled back (aborted), or the spec is invalid; stays so until a retry or a new
--               template
-- A status is only trusted once the operator has seen the current spec: until
-- status.observedGeneration equals metadata.generation the phase may describe the previous
-- template, so a fresh sync reports Progressing instead of a stale Healthy.
local hs = {}

local function condition_message(status, type_)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type_ and c.status == "True" and c.message ~= nil and c.message ~= "" then
      return c.message
    end
  end
  return nil
end

-- The first argument that is a non-empty string (select, not ipairs: arguments may be nil).
local function first_message(...)
  for i = 1, select("#", ...) do
    local m = select(i, ...)
    if m ~= nil and m ~= "" then
      return m
    end
  end
  return ""
end

-- A rollout with adapters (docs/adapters.md) moves its pods between serving versions in place;
-- status.adapterPods lists each pod and the version whose Service selects it (none while it is
-- moved). The pods per version, in one line; and how many serve the stable version.
local function adapter_pods(status)
  if status.adapterPods == nil then
    return nil
  end
  local counts, order, total, on_stable = {}, {}, 0, 0
  for _, p in ipairs(status.adapterPods) do
    local version = p.version or "moving"
    if counts[version] == nil then
      counts[version] = 0
      table.insert(order, version)
    end
    counts[version] = counts[version] + 1
    total = total + 1
    if p.version ~= nil and p.version == status.stableRevision then
      on_stable = on_stable + 1
    end
  end
  table.sort(order)
  local text = "adapter pods:"
  for i, version in ipairs(order) do
    if i > 1 then
      text = text .. ","
    end
    text = text .. " " .. version .. " " .. tostring(counts[version])
  end
  return { total = total, on_stable = on_stable, text = text }
end

local status = obj.status
local generation = obj.metadata.generation
if status == nil or status.observedGeneration == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to observe the rollout"
  return hs
end
if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "waiting for the operator: observed generation "
    .. tostring(status.observedGeneration) .. ", current " .. tostring(generation)
  return hs
end

local phase = status.phase
local pods = adapter_pods(status)
if phase == "Healthy" and pods ~= nil and pods.on_stable < pods.total then
  -- All traffic is on the stable version, but a pod still serves another set (the last moves
  -- after a promotion or a rollback): not yet what git says.
  hs.status = "Progressing"
  hs.message = tostring(pods.on_stable) .. " of " .. tostring(pods.total)
    .. " pods serve the stable version " .. tostring(status.stableRevision) .. "'s adapters ("
    .. pods.text .. ")"
elseif phase == "Healthy" then
  hs.status = "Healthy"
  hs.message = first_message(status.message,
    "stable revision " .. tostring(status.stableRevision) .. " serves all traffic")
elseif phase == "Progressing" then
  hs.status = "Progressing"
  hs.message = first_message(status.message, "release in progress")
  if pods ~= nil then
    hs.message = hs.message .. "; " .. pods.text
  end
elseif phase == "Paused" then
  -- Suspended, like a paused Argo Rollout: waiting for a person (resume/promote), not failing.
  hs.status = "Suspended"
  hs.message = first_message(condition_message(status, "Paused"), status.message, "paused")
elseif phase == "Degraded" then
  -- An invalid spec explains itself in the Valid condition (status False), a rollback in the
  -- Aborted condition and the message.
  local invalid = nil
  if status.conditions ~= nil then
    for _, c in ipairs(status.conditions) do
      if c.type == "Valid" and c.status == "False" then
        invalid = c.message
      end
    end
  end
  hs.status = "Degraded"
  hs.message = first_message(invalid, status.message, condition_message(status, "Aborted"),
    "degraded")
else
  hs.status = "Unknown"
  hs.message = "unknown phase " .. tostring(phase)
end
return hs
