"""Traffic routers: set, get and verify the canary/stable weights of one rollout.

One small interface (:class:`~inference_rollout.traffic.router.TrafficRouter`) so a second mesh
(Istio, a plain nginx) is a new class, not a new branch in the reconciler.
"""
